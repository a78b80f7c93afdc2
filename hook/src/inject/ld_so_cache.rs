//! Reading a container's `/etc/ld.so.cache`, to tell whether it already points every injected
//! soname at the injected file, in which case running ldconfig again would change nothing.
//!
//! That is the case when a container is started again on the rootfs of an earlier start
//! (`docker start`, `docker restart`): the soname links and the cache from the first start are
//! still there. Only the format glibc 2.32 and later write is read (`glibc-ld.so.cache1.1`, see
//! glibc `sysdeps/generic/dl-cache.h`); an older or unknown format, a truncated file or anything
//! odd means "not listed", and ldconfig runs as before.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
/// `struct cache_file_new`: magic and version (20), nlibs, len_strings, flags and padding,
/// extension_offset, unused\[3\].
const HEADER: usize = 48;
/// `struct file_entry_new`: flags (i32), key, value, osversion_unused (u32), hwcap (u64).
const ENTRY: usize = 24;
/// `FLAG_ELF_LIBC6` with this architecture's flag, as ldconfig writes it for a native library.
const NATIVE_FLAGS: Option<i32> = if cfg!(target_arch = "x86_64") {
    Some(0x0303)
} else if cfg!(target_arch = "aarch64") {
    Some(0x0a03)
} else {
    None
};

/// One library the container must find through the cache: its soname and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The name programs link against.
    pub soname: String,
    /// Its path in the container (the soname link, or the file itself).
    pub path: PathBuf,
}

/// True when `cache` is a cache in the current format whose entries for each expected soname
/// all point at the expected path, at least one of them flagged as a native library.
pub fn lists_all(cache: &[u8], expected: &[Expected]) -> bool {
    let Some(entries) = entries(cache) else {
        return false;
    };
    expected.iter().all(|e| {
        let mut native = false;
        for (flags, key, value) in &entries {
            if *key != e.soname.as_bytes() {
                continue;
            }
            if Path::new(OsStr::from_bytes(value)) != e.path {
                return false;
            }
            native |= Some(*flags) == NATIVE_FLAGS;
        }
        native
    })
}

/// One cache entry: flags, soname, path.
type Entry<'a> = (i32, &'a [u8], &'a [u8]);

/// Every entry, or `None` when the file is not a well-formed cache.
fn entries(cache: &[u8]) -> Option<Vec<Entry<'_>>> {
    if cache.len() < HEADER || !cache.starts_with(MAGIC) {
        return None;
    }
    let u32_at = |off: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(
            cache.get(off..off + 4)?.try_into().ok()?,
        ))
    };
    let nlibs = usize::try_from(u32_at(20)?).ok()?;
    let end = HEADER.checked_add(nlibs.checked_mul(ENTRY)?)?;
    if end > cache.len() {
        return None;
    }
    let string = |off: u32| -> Option<&[u8]> {
        let rest = cache.get(usize::try_from(off).ok()?..)?;
        Some(&rest[..rest.iter().position(|&b| b == 0)?])
    };
    (0..nlibs)
        .map(|i| {
            let at = HEADER + i * ENTRY;
            let flags = i32::from_ne_bytes(cache.get(at..at + 4)?.try_into().ok()?);
            Some((flags, string(u32_at(at + 4)?)?, string(u32_at(at + 8)?)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(soname: &str, path: &str) -> Expected {
        Expected {
            soname: soname.into(),
            path: PathBuf::from(path),
        }
    }

    /// A cache in glibc's layout: header, entries, then the strings.
    fn cache(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let strings_at = HEADER + entries.len() * ENTRY;
        let mut strings = Vec::new();
        let mut out = MAGIC.to_vec();
        out.extend((entries.len() as u32).to_ne_bytes());
        out.resize(HEADER, 0);
        for (flags, key, value) in entries {
            let k = (strings_at + strings.len()) as u32;
            strings.extend(key.as_bytes());
            strings.push(0);
            let v = (strings_at + strings.len()) as u32;
            strings.extend(value.as_bytes());
            strings.push(0);
            out.extend(flags.to_ne_bytes());
            out.extend(k.to_ne_bytes());
            out.extend(v.to_ne_bytes());
            out.extend([0u8; 12]);
        }
        out.extend(strings);
        out
    }

    #[test]
    fn every_soname_must_point_at_the_injected_path() {
        let Some(native) = NATIVE_FLAGS else {
            return;
        };
        let c = cache(&[
            (native, "liba.so.1", "/usr/lib/liba.so.1"),
            (native, "libb.so.2", "/usr/lib/libb.so.2"),
            (native, "libc.so.6", "/lib/libc.so.6"),
        ]);
        let want = [
            expected("liba.so.1", "/usr/lib/liba.so.1"),
            expected("libb.so.2", "/usr/lib/libb.so.2"),
        ];
        assert!(lists_all(&c, &want));
        assert!(lists_all(&c, &[]));
        // Missing, elsewhere, or also elsewhere: ldconfig must run.
        assert!(!lists_all(
            &c,
            &[expected("libd.so.1", "/usr/lib/libd.so.1")]
        ));
        assert!(!lists_all(
            &c,
            &[expected("libc.so.6", "/usr/lib/libc.so.6")]
        ));
        let twice = cache(&[
            (native, "liba.so.1", "/usr/lib/liba.so.1"),
            (native, "liba.so.1", "/opt/old/liba.so.1"),
        ]);
        assert!(!lists_all(&twice, &want[..1]));
        // Only a foreign-architecture entry: not usable by this machine's programs.
        let foreign = cache(&[(0x0003, "liba.so.1", "/usr/lib/liba.so.1")]);
        assert!(!lists_all(&foreign, &want[..1]));
    }

    #[test]
    fn malformed_or_old_caches_list_nothing() {
        let want = [expected("liba.so.1", "/usr/lib/liba.so.1")];
        let good = cache(&[(NATIVE_FLAGS.unwrap_or(3), "liba.so.1", "/usr/lib/liba.so.1")]);
        for bad in [
            &b""[..],
            b"ld.so-1.7.0\0\0\0\0\0",
            &good[..HEADER + 3],
            &good[..good.len() - 3],
        ] {
            assert!(!lists_all(bad, &want));
        }
        let mut huge = good.clone();
        huge[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(!lists_all(&huge, &want));
    }

    #[test]
    fn reads_what_this_hosts_ldconfig_wrote() {
        // The host's own cache, against `ldconfig -p`: same entries, same paths.
        let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
            return;
        };
        let Ok(out) = std::process::Command::new("/sbin/ldconfig")
            .arg("-p")
            .output()
        else {
            return;
        };
        let Some(entries) = entries(&bytes) else {
            panic!("the host's /etc/ld.so.cache is not in the current format");
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let listed: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| {
                let (left, path) = l.trim().split_once(" => ")?;
                let name = left.split(" (").next()?;
                Some((name.to_owned(), path.to_owned()))
            })
            .collect();
        assert_eq!(listed.len(), entries.len());
        for (_, key, value) in &entries {
            let pair = (
                String::from_utf8_lossy(key).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            );
            assert!(listed.contains(&pair), "{pair:?} not in ldconfig -p");
        }
    }
}
