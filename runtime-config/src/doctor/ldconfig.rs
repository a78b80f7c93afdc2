//! The `ldconfig` the hook runs, chrooted, in containers that get libraries: it must exist and
//! be statically linked, because the container's image may have no dynamic loader, or another
//! libc. (Debian's and Fedora's `/sbin/ldconfig` are static; Ubuntu's is a shell script around
//! `/sbin/ldconfig.real`.)

use std::io::Read;
use std::path::Path;

use devinject_hook::config::HostConfig;

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// How an executable is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linkage {
    /// An ELF file without a program interpreter.
    Static,
    /// An ELF file with a program interpreter (`PT_INTERP`), named here.
    Dynamic(String),
    /// Not an ELF file (a script, ...).
    NotElf,
}

const PT_INTERP: u32 = 3;

/// Reads the ELF header and program headers of `bytes` (ELF32/ELF64, either byte order) and
/// says whether it names a program interpreter. `None` when the headers are truncated.
pub fn linkage(bytes: &[u8]) -> Option<Linkage> {
    if bytes.len() < 16 || &bytes[..4] != b"\x7fELF" {
        return Some(Linkage::NotElf);
    }
    let wide = match bytes[4] {
        1 => false,
        2 => true,
        _ => return Some(Linkage::NotElf),
    };
    let big = bytes[5] == 2;
    let u16_at = |o: usize| -> Option<u64> {
        let b: [u8; 2] = bytes.get(o..o + 2)?.try_into().ok()?;
        Some(u64::from(if big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }))
    };
    let u32_at = |o: usize| -> Option<u64> {
        let b: [u8; 4] = bytes.get(o..o + 4)?.try_into().ok()?;
        Some(u64::from(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let b: [u8; 8] = bytes.get(o..o + 8)?.try_into().ok()?;
        Some(if big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    };
    let word = |o: usize| if wide { u64_at(o) } else { u32_at(o) };
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(32)?, u16_at(54)?, u16_at(56)?)
    } else {
        (u32_at(28)?, u16_at(42)?, u16_at(44)?)
    };
    for i in 0..phnum {
        let at = usize::try_from(phoff + i * phentsize).ok()?;
        if u32_at(at)? as u32 != PT_INTERP {
            continue;
        }
        let (offset, size) = if wide {
            (word(at + 8)?, word(at + 32)?)
        } else {
            (word(at + 4)?, word(at + 16)?)
        };
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        let name = bytes.get(start..end)?;
        let name = String::from_utf8_lossy(name)
            .trim_end_matches('\0')
            .to_string();
        return Some(Linkage::Dynamic(name));
    }
    Some(Linkage::Static)
}

/// Reads enough of `path` to find its program headers (64 KiB).
pub fn linkage_of(path: &Path) -> std::io::Result<Option<Linkage>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(64 * 1024)
        .read_to_end(&mut bytes)?;
    Ok(linkage(&bytes))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian ELF64 header with one program header of type `ptype` pointing at
    /// `/lib/ld.so\0`.
    fn elf64(ptype: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 + 16];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        b[64..68].copy_from_slice(&ptype.to_le_bytes());
        b[72..80].copy_from_slice(&120u64.to_le_bytes());
        b[96..104].copy_from_slice(&11u64.to_le_bytes());
        b[120..131].copy_from_slice(b"/lib/ld.so\0");
        b
    }

    #[test]
    fn tells_static_dynamic_and_scripts_apart() {
        assert_eq!(linkage(&elf64(1)), Some(Linkage::Static));
        assert_eq!(
            linkage(&elf64(PT_INTERP)),
            Some(Linkage::Dynamic("/lib/ld.so".to_string()))
        );
        assert_eq!(linkage(b"#!/bin/sh\nexec x\n"), Some(Linkage::NotElf));
        assert_eq!(linkage(&elf64(PT_INTERP)[..70]), None);
    }

    #[test]
    fn the_hosts_own_binaries_when_present() {
        // Debian's ldconfig is static, /bin/sh is not; skip what this host lacks.
        if let Ok(Some(l)) = linkage_of(Path::new("/bin/sh")) {
            assert!(matches!(l, Linkage::Dynamic(_)), "{l:?}");
        }
    }
}
