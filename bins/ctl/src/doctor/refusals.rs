//! The last container starts the hook, the shim and the NRI plugin refused on this node, read
//! from the node's decision log (`decision_log_dir`, [`devinject_decision_log`]): what a user
//! saw fail, with the time, the engine path, the container, the profiles and the reason.
//!
//! A refusal is something that happened, not something broken on the host: each is `info`.
//! A log that cannot be read (a link or a FIFO planted at its name, a directory others may
//! write) is a warning, naming the path and what to do.

use devinject_decision_log::{last, Decision, MAX_MESSAGE_BYTES};
use devinject_devices::excerpt::{Excerpt, Longer};
use devinject_hostconfig::HostConfig;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// How many refusals doctor shows unless told otherwise.
pub const DEFAULT_COUNT: usize = 10;

/// Adds the last [`DoctorRequest::refusals`] refusals of `host`'s decision log.
pub fn check(req: &DoctorRequest, host: &HostConfig, report: &mut DoctorReport) {
    if req.refusals == 0 {
        return;
    }
    let Some(dir) = host.decision_log() else {
        report.add(
            Section::Refusals,
            "decision_log_dir",
            Severity::Info,
            "decision_log_dir is empty: refused starts are not recorded on this node",
            None,
        );
        return;
    };
    let log = dir.join(devinject_decision_log::LOG_NAME);
    let decisions = match last(&req.access(dir), req.refusals) {
        Ok(d) => d,
        Err(e) => {
            report.add(
                Section::Refusals,
                log.display().to_string(),
                Severity::Warning,
                e.to_string(),
                Some(
                    "the device plugin cannot count refusals either; remove what is there and \
                     let the hook make the directory (mode 0700, root)"
                        .to_string(),
                ),
            );
            return;
        }
    };
    if decisions.is_empty() {
        report.add(
            Section::Refusals,
            log.display().to_string(),
            Severity::Ok,
            format!("no refused start recorded in {}", log.display()),
            None,
        );
        return;
    }
    for d in &decisions {
        report.add(
            Section::Refusals,
            Excerpt(&d.container).to_string(),
            Severity::Info,
            line(d),
            None,
        );
    }
}

/// One refusal on one line: time, path, reason, container, profiles, message. The container
/// id, the profile names and the message are the log's, which a container's values reach: each
/// is escaped through the one excerpt (`devices::excerpt`), so that control characters and bidi
/// overrides show as escapes and a line of the log is one line on screen.
pub fn line(d: &Decision) -> String {
    let container = if d.container.is_empty() {
        "(unknown container)".to_owned()
    } else {
        Excerpt(&d.container).to_string()
    };
    let profiles = if d.profiles.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = d.profiles.iter().map(|p| Excerpt(p).to_string()).collect();
        format!(" [{}]", names.join(","))
    };
    format!(
        "{} {} {} {container}{profiles}: {}",
        d.time_utc(),
        d.path,
        d.reason,
        Longer(&d.message, MAX_MESSAGE_BYTES)
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use devinject_decision_log::{record, EnginePath, Reason};

    use super::*;

    fn host(dir: &Path) -> HostConfig {
        HostConfig {
            decision_log_dir: dir.to_owned(),
            ..HostConfig::default()
        }
    }

    fn req(root: &Path, refusals: usize) -> DoctorRequest {
        DoctorRequest {
            root: root.to_owned(),
            refusals,
            ..DoctorRequest::default()
        }
    }

    #[test]
    fn the_last_refusals_are_listed_oldest_first_with_reason_and_message() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run/devinject");
        std::fs::create_dir_all(root.path().join("run")).unwrap();
        for i in 0..12 {
            let mut d = Decision::now(
                EnginePath::Shim,
                format!("c{i}"),
                vec!["demo".into()],
                Reason::Policy,
                format!("profile demo: device \"{i}\" was not granted\u{7}"),
            );
            d.time_unix_ms = 1_798_761_599_000;
            record(&dir, &d).unwrap();
        }
        let mut report = DoctorReport::default();
        check(
            &req(root.path(), 3),
            &host(Path::new("/run/devinject")),
            &mut report,
        );
        let lines: Vec<&str> = report.findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(
            lines,
            [9, 10, 11].map(|i| format!(
                "2026-12-31T23:59:59Z shim policy c{i} [demo]: profile demo: device \"{i}\" was not granted\\u{{7}}"
            ))
        );
        assert!(report
            .findings
            .iter()
            .all(|f| f.severity == Severity::Info && f.section == Section::Refusals));
    }

    /// A container id, a profile name and a message from the log are shown escaped, byte for
    /// byte: ESC, a C1 control (CSI) and a bidi override never reach the terminal.
    #[test]
    fn the_log_s_values_are_shown_escaped() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run/devinject");
        std::fs::create_dir_all(root.path().join("run")).unwrap();
        let mut d = Decision::now(
            EnginePath::Hook,
            "c\u{1b}[2J\u{9b}1m\u{202e}exe.txt",
            vec!["d\u{85}emo".into()],
            Reason::Policy,
            "profile demo: device \"\u{1b}]0;x\u{7}\u{202e}\" was not granted",
        );
        d.time_unix_ms = 1_798_761_599_000;
        record(&dir, &d).unwrap();
        let mut report = DoctorReport::default();
        check(
            &req(root.path(), 1),
            &host(Path::new("/run/devinject")),
            &mut report,
        );
        let f = &report.findings[0];
        assert_eq!(
            f.message,
            r#"2026-12-31T23:59:59Z hook policy c\u{1b}[2J\u{9b}1m\u{202e}exe.txt [d\u{85}emo]: profile demo: device "\u{1b}]0;x\u{7}\u{202e}" was not granted"#
        );
        assert_eq!(f.subject, r"c\u{1b}[2J\u{9b}1m\u{202e}exe.txt");
        for text in [&f.message, &f.subject] {
            assert!(
                !text.contains(['\u{1b}', '\u{9b}', '\u{85}', '\u{7}', '\u{202e}']),
                "{text:?}"
            );
        }
    }

    #[test]
    fn none_recorded_off_or_unreadable() {
        let root = tempfile::tempdir().unwrap();
        let mut report = DoctorReport::default();
        check(
            &req(root.path(), 10),
            &host(Path::new("/none")),
            &mut report,
        );
        assert_eq!(report.findings[0].severity, Severity::Ok);
        assert!(report.findings[0]
            .message
            .contains("no refused start recorded in /none/decisions.log"));
        let mut report = DoctorReport::default();
        check(&req(root.path(), 10), &host(Path::new("")), &mut report);
        assert!(report.findings[0].message.contains("not recorded"));
        let mut report = DoctorReport::default();
        let dir = root.path().join("log");
        std::fs::create_dir(&dir).unwrap();
        nix::unistd::mkfifo(
            &dir.join("decisions.log"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        check(&req(root.path(), 10), &host(Path::new("/log")), &mut report);
        assert_eq!(report.findings[0].severity, Severity::Warning);
        assert!(
            report.findings[0].message.contains("is a FIFO"),
            "{:?}",
            report.findings
        );
        let mut report = DoctorReport::default();
        check(&req(root.path(), 0), &host(Path::new("/log")), &mut report);
        assert!(report.findings.is_empty(), "--refusals 0 skips the section");
    }
}
