//! Device aliases: the other ids a driver gives its devices, read from its per-device files.
//!
//! NVIDIA's driver describes each GPU in `/proc/driver/nvidia/gpus/<bus>/information`, lines of
//! `Key: value` (`GPU UUID: GPU-6d1c...`, `Bus Location: 0000:01:00.0`, `Device Minor: 0`).
//! Users and NVIDIA's device plugin name GPUs by UUID or bus id as often as by index; a profile's
//! `[discovery.aliases]` says which file, which key ties it to a device node (`{n}`, the number
//! ending the node's name) and which keys are aliases.
//!
//! The files are the host's (procfs), read bounded: at most [`MAX_FILE`] bytes each and
//! [`MAX_FILES`] files. An alias that is not a valid device id, is all digits (it would read as an
//! index), or names another device too is dropped with a warning: an alias resolves only to its
//! own device.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use devinject_devices::names::{DeviceId, ProfileName};
use devinject_devices::profile::AliasSpec;
use devinject_devices::HostRoots;

/// The most bytes read of one file (NVIDIA's are under 1 KiB).
pub const MAX_FILE: u64 = 64 * 1024;

/// The most files read for one profile.
pub const MAX_FILES: usize = 4096;

/// Each device's `Key: value` pairs the profile names, by the device's node number.
pub type AliasValues = HashMap<u64, BTreeMap<String, String>>;

/// Reads the alias files of `spec` under the proc root. Unreadable or malformed files are
/// skipped (logged at debug): a device without aliases still answers to its id.
pub fn read_alias_files(spec: &AliasSpec, roots: &HostRoots, profile: &ProfileName) -> AliasValues {
    let pattern = roots.in_proc_root(&spec.files);
    let Ok(paths) = glob::glob(&pattern.to_string_lossy()) else {
        return AliasValues::new();
    };
    let mut out = AliasValues::new();
    for path in paths.flatten().take(MAX_FILES) {
        let Some(text) = read_bounded(&path) else {
            tracing::debug!(%profile, path = %path.display(), "alias file unreadable; skipped");
            continue;
        };
        let pairs = parse_pairs(&text);
        let Some(n) = pairs
            .get(spec.device_key.as_str())
            .and_then(|v| v.parse::<u64>().ok())
        else {
            tracing::debug!(%profile, path = %path.display(), key = %spec.device_key, "alias file names no device number; skipped");
            continue;
        };
        let wanted = spec
            .keys
            .iter()
            .filter_map(|k| Some((k.clone(), pairs.get(k.as_str())?.to_string())))
            .collect();
        out.insert(n, wanted);
    }
    out
}

/// The first [`MAX_FILE`] bytes of `path` when it is a regular file (procfs's are): a FIFO or a
/// device node a wrong `proc_root` leads to is never opened for reading (a FIFO would block the
/// hook), as with profiles ([`crate::profile_file::open_if_regular`]).
fn read_bounded(path: &Path) -> Option<String> {
    let (file, _) = crate::profile_file::open_if_regular(path).ok()?.ok()?;
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `Key: value` lines, split at the first `:`, both sides trimmed; other lines ignored.
fn parse_pairs(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim(), v.trim()))
        })
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .collect()
}

/// The aliases worth keeping of `value`: a valid device id that is not all digits.
pub fn usable(value: &str) -> Option<DeviceId> {
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    DeviceId::new(value).ok()
}

/// Drops every alias that is some device's id or another device's alias too, so each alias
/// resolves to exactly one device. `devices` is (id, aliases) per device.
pub fn keep_unambiguous(profile: &ProfileName, devices: &mut [(&DeviceId, &mut Vec<DeviceId>)]) {
    let mut count: HashMap<String, usize> = HashMap::new();
    for (id, aliases) in devices.iter() {
        *count.entry(id.as_str().to_owned()).or_default() += 1;
        for a in aliases.iter() {
            *count.entry(a.as_str().to_owned()).or_default() += 1;
        }
    }
    for (id, aliases) in devices.iter_mut() {
        aliases.retain(|a| {
            let unique = count.get(a.as_str()) == Some(&1);
            if !unique && a != *id {
                tracing::warn!(%profile, device = %id, alias = %a, "alias names more than one device; dropped");
            }
            unique
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFORMATION: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t GPU-6d1c1f4e-8a2b-4c3d-9e0f-112233445566\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nBus Location: \t 0000:1a:00.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n";

    fn spec() -> AliasSpec {
        AliasSpec {
            files: "driver/nvidia/gpus/*/information".into(),
            device_key: "Device Minor".into(),
            keys: vec!["GPU UUID".into(), "Bus Location".into()],
        }
    }

    #[test]
    fn nvidia_information_files_give_the_uuid_and_bus_of_their_minor() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = dir.path().join("driver/nvidia/gpus/0000:1a:00.0");
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(gpu.join("information"), INFORMATION).unwrap();
        let bad = dir.path().join("driver/nvidia/gpus/0000:1b:00.0");
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("information"), "Model: x\n").unwrap();
        // A FIFO where a file should be is skipped, never opened for reading (it would block).
        let fifo = dir.path().join("driver/nvidia/gpus/0000:1c:00.0");
        std::fs::create_dir_all(&fifo).unwrap();
        nix::unistd::mkfifo(&fifo.join("information"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let roots = HostRoots {
            proc_root: dir.path().to_owned(),
            ..HostRoots::default()
        };
        let got = read_alias_files(&spec(), &roots, &ProfileName::new("nvidia").unwrap());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            got[&3]["GPU UUID"],
            "GPU-6d1c1f4e-8a2b-4c3d-9e0f-112233445566"
        );
        assert_eq!(got[&3]["Bus Location"], "0000:1a:00.0");
    }

    #[test]
    fn digits_and_invalid_ids_are_not_aliases() {
        assert!(usable("12").is_none());
        assert!(usable("a b").is_none());
        assert!(usable("0000:1a:00.0").is_some());
    }

    #[test]
    fn an_alias_naming_two_devices_or_another_devices_id_is_dropped() {
        let id = |s: &str| DeviceId::new(s).unwrap();
        let (a, b) = (id("0"), id("1"));
        let mut aa = vec![id("GPU-a"), id("shared"), id("x1")];
        let mut bb = vec![id("GPU-b"), id("shared"), id("0")];
        let mut devices = [(&a, &mut aa), (&b, &mut bb)];
        keep_unambiguous(&ProfileName::new("nvidia").unwrap(), &mut devices);
        assert_eq!(aa, [id("GPU-a"), id("x1")]);
        assert_eq!(bb, [id("GPU-b")]);
    }
}
