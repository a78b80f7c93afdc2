//! The real binary out of descriptors (a lowered `RLIMIT_NOFILE`, more connections than it
//! allows): a failed accept is logged a bounded number of times, not once per retry, and
//! reviews are answered again once the flood goes. docs/security.md, the webhook's row.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_devinject-webhook");
/// What the server logs for a failed accept.
const FAILED: &str = "accepting a connection failed";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line containing `what`, for `within` at most, with every line read meanwhile.
fn line_with(
    lines: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    what: &str,
    within: Duration,
) -> bool {
    let give_up = Instant::now() + within;
    while let Some(left) = give_up.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(what);
                seen.push(line);
                if found {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn out_of_descriptors_is_logged_a_bounded_number_of_times_and_served_again() {
    let dir = tempfile::tempdir().unwrap();
    let (certs, profiles) = (dir.path().join("certs"), dir.path().join("profiles"));
    std::fs::create_dir(&profiles).unwrap();
    let made = Command::new(BIN)
        .args(["certs", "--name", "127.0.0.1", "--out"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // 32 descriptors: fewer than the 32 connections the server keeps open at most, with the
    // runtime's own and the listener's.
    let child = Command::new("sh")
        .args(["-c", "ulimit -n 32 && exec \"$0\" \"$@\"", BIN, "serve"])
        .arg("--profiles-dir")
        .arg(&profiles)
        .arg("--listen")
        .arg(address.to_string())
        .arg("--tls-cert")
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .args(["--metrics-address", "off"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let stderr = child.0.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    assert!(
        line_with(&lines, &mut seen, "serving", Duration::from_secs(10)),
        "{seen:#?}"
    );
    // Connections that never handshake, more than the server has descriptors for.
    let flood: Vec<_> = (0..64)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    assert!(
        line_with(&lines, &mut seen, FAILED, Duration::from_secs(10)),
        "{seen:#?}"
    );
    // A second of retries: a loop that did not pause, or logged each, would write thousands.
    let _ = line_with(&lines, &mut seen, "no such line", Duration::from_secs(1));
    drop(flood);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let (answer, _) = runtime.block_on(common::review(&common::connector(&ca), address));
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    while let Ok(line) = lines.try_recv() {
        seen.push(line);
    }
    let failed = seen.iter().filter(|l| l.contains(FAILED)).count();
    assert!(
        (1..=2).contains(&failed),
        "{failed} lines for failed accepts:\n{:#?}",
        &seen[..seen.len().min(20)]
    );
}
