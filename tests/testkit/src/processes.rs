//! The host's processes, as tests that check nothing is left running look at them.

/// Every process whose command line contains `marker`, as `(pid, command line with spaces)`.
/// Processes that end while they are read are passed over.
pub fn naming(marker: &[u8]) -> Vec<(i32, String)> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !marker.is_empty() && cmdline.windows(marker.len()).any(|w| w == marker) {
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_a_process_by_a_word_of_its_command_line() {
        let marker = format!("devinject-testkit-marker-{}", std::process::id());
        // The shell's builtin `read` waits on the pipe in the shell itself: a command it would
        // exec instead (`sleep`) would replace the command line holding the marker.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read line", &marker])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The kernel lets the parent of a vfork-style spawn go on before the new program's
        // command line is in place (`/proc/<pid>/cmdline` reads empty for that moment): look
        // again until it shows, for at most 5 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let found = super::naming(marker.as_bytes());
            if !found.is_empty() || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, child.id() as i32);
        assert!(found[0].1.contains(&marker), "{found:?}");
        assert!(super::naming(b"").is_empty());
    }
}
