//! The lowest `cdiVersion` that holds a spec: runtimes reject specs whose version is newer than
//! they know, and CDI rejects specs using a field newer than their version. An engine whose CDI
//! parser predates a field refuses the whole spec (podman 4.3, Debian 12's, fails every device of
//! a spec carrying `additionalGids` with "unknown field"), so a spec can also be fitted to the
//! newest version the engine reads ([`fit`]).

use std::fmt;
use std::str::FromStr;

use crate::spec::CdiSpec;

/// A CDI spec version, `MAJOR.MINOR.PATCH`, ordered as versions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CdiVersion {
    major: u32,
    minor: u32,
    patch: u32,
}

impl CdiVersion {
    /// The first version.
    const BASE: CdiVersion = CdiVersion::new(0, 3, 0);
    /// The first version with a mount's `type`.
    const MOUNT_TYPE: CdiVersion = CdiVersion::new(0, 4, 0);
    /// The first version with `hostPath` and device names starting with a digit.
    const HOST_PATH: CdiVersion = CdiVersion::new(0, 5, 0);
    /// The first version with a dot in the kind's class.
    const DOTTED_CLASS: CdiVersion = CdiVersion::new(0, 6, 0);
    /// The first version with `additionalGids`.
    pub const ADDITIONAL_GIDS: CdiVersion = CdiVersion::new(0, 7, 0);

    const fn new(major: u32, minor: u32, patch: u32) -> Self {
        CdiVersion {
            major,
            minor,
            patch,
        }
    }
}

/// A version that is not `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a CDI version: give MAJOR.MINOR.PATCH, e.g. 0.6.0")]
pub struct VersionError {
    text: String,
}

impl FromStr for CdiVersion {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || VersionError {
            text: text.chars().take(32).collect(),
        };
        let mut parts = text.split('.').map(|p| {
            if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
                Err(bad())
            } else {
                p.parse::<u32>().map_err(|_| bad())
            }
        });
        let version = CdiVersion {
            major: parts.next().ok_or_else(bad)??,
            minor: parts.next().ok_or_else(bad)??,
            patch: parts.next().ok_or_else(bad)??,
        };
        match parts.next() {
            None => Ok(version),
            Some(_) => Err(bad()),
        }
    }
}

impl fmt::Display for CdiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Makes `spec` one an engine reading CDI up to `newest` accepts, and sets its `cdiVersion`.
/// `additionalGids` is left out when `newest` predates it (the nodes stay; a container user
/// without their group cannot open a node only the group may use): `Ok` then says what was
/// left out, for the report. What a spec cannot do without (device names starting with a
/// digit, a class with a dot) is an error naming the version it needs.
pub fn fit(spec: &mut CdiSpec, newest: CdiVersion) -> Result<Option<String>, String> {
    let mut left_out = None;
    if newest < CdiVersion::ADDITIONAL_GIDS {
        let mut gids: Vec<u32> = spec
            .edits_mut()
            .flat_map(|e| std::mem::take(&mut e.additional_gids))
            .collect();
        gids.sort_unstable();
        gids.dedup();
        if !gids.is_empty() {
            let list: Vec<String> = gids.iter().map(u32::to_string).collect();
            left_out = Some(format!(
                "additionalGids {} left out: they need CDI {}, newer than the {newest} the \
                 engine reads; a container user outside those groups cannot open the nodes only \
                 they may use",
                list.join(","),
                CdiVersion::ADDITIONAL_GIDS
            ));
        }
    }
    if newest < CdiVersion::MOUNT_TYPE {
        // Runc and the runtimes of that age read a mount without a type as a bind mount.
        for m in spec.edits_mut().flat_map(|e| e.mounts.iter_mut()) {
            m.fs_type.clear();
        }
    }
    let version = min_version(spec);
    if version > newest {
        return Err(format!(
            "its spec needs CDI {version} (device names starting with a digit need 0.5.0, a \
             class with a dot 0.6.0), newer than the {newest} the engine reads: name a version \
             of at least {version}, or an engine that reads it"
        ));
    }
    spec.cdi_version = version.to_string();
    Ok(left_out)
}

/// The lowest CDI version that holds what `spec` uses.
pub fn min_version(spec: &CdiSpec) -> CdiVersion {
    if spec.edits().any(|e| !e.additional_gids.is_empty()) {
        return CdiVersion::ADDITIONAL_GIDS;
    }
    let class = spec.kind.split_once('/').map_or("", |(_, c)| c);
    if class.contains('.') {
        return CdiVersion::DOTTED_CLASS;
    }
    let host_paths = spec
        .edits()
        .flat_map(|e| e.device_nodes.iter())
        .any(|n| n.host_path.is_some());
    let digit_names = spec
        .devices
        .iter()
        .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()));
    let typed_mounts = spec
        .edits()
        .flat_map(|e| e.mounts.iter())
        .any(|m| !m.fs_type.is_empty());
    if host_paths || digit_names {
        CdiVersion::HOST_PATH
    } else if typed_mounts {
        CdiVersion::MOUNT_TYPE
    } else {
        CdiVersion::BASE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::sample::spec;

    #[test]
    fn version_is_the_lowest_that_holds_the_spec() {
        assert_eq!(
            min_version(&spec("devinject.io/kvm", &["kvm", "all"], None)).to_string(),
            "0.3.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/demo", &["0", "all"], None)).to_string(),
            "0.5.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/kvm", &["kvm"], Some("/h/dev/x"))).to_string(),
            "0.5.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/a.b", &["x"], None)).to_string(),
            "0.6.0"
        );
        let mut grouped = spec("devinject.io/a.b", &["0"], Some("/h/dev/x"));
        grouped.devices[0].container_edits.additional_gids = vec![44];
        assert_eq!(min_version(&grouped), CdiVersion::ADDITIONAL_GIDS);
        grouped.devices[0].container_edits.additional_gids.clear();
        grouped.container_edits.additional_gids = vec![44];
        assert_eq!(
            min_version(&grouped),
            CdiVersion::ADDITIONAL_GIDS,
            "spec-level edits count too"
        );
    }

    #[test]
    fn versions_parse_and_order_as_numbers() {
        let v = |t: &str| t.parse::<CdiVersion>().unwrap();
        assert!(v("0.10.0") > v("0.7.0"));
        assert!(v("0.6.0") < CdiVersion::ADDITIONAL_GIDS);
        assert_eq!(v("1.0.2").to_string(), "1.0.2");
        for bad in [
            "",
            "0.6",
            "0.6.0.1",
            "v0.6.0",
            "0.-1.0",
            "0..0",
            "0.99999999999.0",
        ] {
            let e = bad.parse::<CdiVersion>().unwrap_err();
            assert!(e.to_string().contains("MAJOR.MINOR.PATCH"), "{bad}: {e}");
        }
    }

    #[test]
    fn fitting_below_additional_gids_leaves_them_out_and_says_so() {
        let mut grouped = spec("devinject.io/kvm", &["0", "all"], None);
        grouped.devices[0].container_edits.additional_gids = vec![36];
        grouped.devices[1].container_edits.additional_gids = vec![36];
        grouped.container_edits.additional_gids = vec![44];
        let mut kept = grouped.clone();

        let note = fit(&mut grouped, "0.6.0".parse().unwrap()).unwrap();
        assert!(note.unwrap().starts_with("additionalGids 36,44 left out"));
        assert_eq!(grouped.cdi_version, "0.5.0");
        assert!(grouped.container_edits.additional_gids.is_empty());
        assert!(grouped
            .devices
            .iter()
            .all(|d| d.container_edits.additional_gids.is_empty()));

        // An engine that reads 0.7.0 gets them.
        assert_eq!(fit(&mut kept, CdiVersion::ADDITIONAL_GIDS), Ok(None));
        assert_eq!(kept.cdi_version, "0.7.0");
        assert_eq!(kept.container_edits.additional_gids, [44]);
    }

    #[test]
    fn a_typed_mount_needs_0_4_0_and_loses_its_type_for_an_older_engine() {
        let mut mounted = crate::spec::sample::mounted();
        assert_eq!(min_version(&mounted).to_string(), "0.4.0");
        let mut older = mounted.clone();

        assert_eq!(fit(&mut mounted, "0.4.0".parse().unwrap()), Ok(None));
        assert_eq!(mounted.cdi_version, "0.4.0");
        let text = mounted.to_text();
        assert!(text.contains("\"type\": \"bind\""), "{text}");

        assert_eq!(fit(&mut older, "0.3.0".parse().unwrap()), Ok(None));
        assert_eq!(older.cdi_version, "0.3.0");
        let text = older.to_text();
        assert!(!text.contains("\"bind\""), "{text}");
        assert!(text.contains("\"rbind\""), "still a bind mount:\n{text}");
    }

    #[test]
    fn fitting_below_what_the_names_need_is_an_error_naming_it() {
        let mut digits = spec("devinject.io/demo", &["0", "all"], None);
        let e = fit(&mut digits, "0.3.0".parse().unwrap()).unwrap_err();
        assert!(
            e.contains("needs CDI 0.5.0") && e.contains("at least 0.5.0"),
            "{e}"
        );
        assert_eq!(
            digits.cdi_version,
            spec("devinject.io/demo", &["0"], None).cdi_version
        );
    }
}
