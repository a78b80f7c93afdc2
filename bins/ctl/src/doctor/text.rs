//! The report on a terminal: one heading per section, one line per finding with its severity,
//! and the fix under it.

use std::fmt::Write;

use crate::doctor::{DoctorReport, Section, Severity};

/// Renders `report`; the last line says whether the host is broken (`strict`: warnings count).
pub fn render(report: &DoctorReport, strict: bool) -> String {
    let mut out = String::new();
    // In the sections' declared order; within one, in the order found.
    let mut sorted: Vec<_> = report.findings.iter().collect();
    sorted.sort_by_key(|f| f.section);
    let mut shown: Option<Section> = None;
    for f in sorted {
        if shown != Some(f.section) {
            let _ = writeln!(out, "{}", f.section.title());
            shown = Some(f.section);
        }
        let _ = writeln!(out, "  {:<5}  {}", f.severity.label(), f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(out, "         fix: {fix}");
        }
    }
    let errors = report.count(Severity::Error);
    let warnings = report.count(Severity::Warning);
    let verdict = if report.is_broken(strict) {
        "devinject will not work as configured on this host"
    } else if warnings > 0 {
        "devinject can work on this host; see the warnings"
    } else {
        "devinject can work on this host"
    };
    let _ = writeln!(out, "\n{errors} error(s), {warnings} warning(s): {verdict}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_section_and_ends_with_the_verdict() {
        let mut r = DoctorReport::default();
        r.add(Section::Kubelet, "k", Severity::Info, "no kubelet", None);
        r.add(
            Section::Profiles,
            "p",
            Severity::Error,
            "broken.toml: bad key",
            Some("fix it".to_string()),
        );
        let text = render(&r, false);
        assert!(
            text.find("profiles\n  ERROR  broken.toml: bad key\n         fix: fix it\n")
                < text.find("kubelet\n  info   no kubelet\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "1 error(s), 0 warning(s): devinject will not work as configured on this host\n"
            ),
            "{text}"
        );
    }
}
