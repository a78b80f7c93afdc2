//! The `ldconfig` the hook runs, chrooted, in containers that get libraries: it must exist and
//! be statically linked, because the container's image may have no dynamic loader, or another
//! libc. (Debian's and Fedora's `/sbin/ldconfig` are static; Ubuntu's is a shell script around
//! `/sbin/ldconfig.real`.)

use devinject_discovery::elf_linkage::{linkage_of, Linkage};
use devinject_hostconfig::HostConfig;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// Checks the configured `ldconfig`; `needed` when some profile with devices injects libraries
/// (a missing or dynamic ldconfig is then an error, else a remark).
pub fn check(req: &DoctorRequest, host: &HostConfig, needed: bool, report: &mut DoctorReport) {
    let shown = host.ldconfig.display().to_string();
    let severity = if needed {
        Severity::Error
    } else {
        Severity::Info
    };
    let effect = "the hook cannot refresh the containers' linker cache, so injected libraries \
                  are not found by soname";
    let fix = Some(
        "point `ldconfig` in the host configuration at a statically linked ldconfig (Debian's and \
         Fedora's /sbin/ldconfig; on Ubuntu /sbin/ldconfig.real)"
            .to_string(),
    );
    match linkage_of(&req.access(&host.ldconfig)) {
        Err(e) => report.add(
            Section::Ldconfig,
            &shown,
            severity,
            format!("{shown}: {e}: {effect}"),
            fix,
        ),
        Ok(Some(Linkage::Static)) if crate::doctor::is_executable(&req.access(&host.ldconfig)) => {
            report.add(
                Section::Ldconfig,
                &shown,
                Severity::Ok,
                format!("{shown} is statically linked"),
                None,
            )
        }
        Ok(Some(Linkage::Static)) => report.add(
            Section::Ldconfig,
            &shown,
            severity,
            format!("{shown} is not executable: {effect}"),
            fix,
        ),
        Ok(Some(Linkage::Dynamic(interp))) => report.add(
            Section::Ldconfig,
            &shown,
            severity,
            format!(
                "{shown} is dynamically linked (interpreter {interp}), and runs inside containers \
                 whose image may lack it: {effect}"
            ),
            fix,
        ),
        Ok(Some(Linkage::NotElf)) => report.add(
            Section::Ldconfig,
            &shown,
            severity,
            format!("{shown} is not an ELF executable (a script?): {effect}"),
            fix,
        ),
        Ok(None) => report.add(
            Section::Ldconfig,
            &shown,
            severity,
            format!("{shown} is a truncated ELF file: {effect}"),
            fix,
        ),
    }
}
