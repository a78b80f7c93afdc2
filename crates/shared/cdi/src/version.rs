//! The lowest `cdiVersion` that holds a spec: runtimes reject specs whose version is newer than
//! they know, and CDI rejects specs using a field newer than their version.

use crate::spec::CdiSpec;

/// The lowest CDI version that holds what `spec` uses.
pub fn min_version(spec: &CdiSpec) -> &'static str {
    let edits = || {
        std::iter::once(&spec.container_edits)
            .chain(spec.devices.iter().map(|d| &d.container_edits))
    };
    if edits().any(|e| !e.additional_gids.is_empty()) {
        return "0.7.0";
    }
    let class = spec.kind.split_once('/').map_or("", |(_, c)| c);
    if class.contains('.') {
        return "0.6.0";
    }
    let host_paths = edits()
        .flat_map(|e| e.device_nodes.iter())
        .any(|n| n.host_path.is_some());
    let digit_names = spec
        .devices
        .iter()
        .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()));
    if host_paths || digit_names {
        "0.5.0"
    } else {
        "0.3.0"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::sample::spec;

    #[test]
    fn version_is_the_lowest_that_holds_the_spec() {
        assert_eq!(
            min_version(&spec("devinject.io/kvm", &["kvm", "all"], None)),
            "0.3.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/demo", &["0", "all"], None)),
            "0.5.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/kvm", &["kvm"], Some("/h/dev/x"))),
            "0.5.0"
        );
        assert_eq!(
            min_version(&spec("devinject.io/a.b", &["x"], None)),
            "0.6.0"
        );
        let mut grouped = spec("devinject.io/a.b", &["0"], Some("/h/dev/x"));
        grouped.devices[0].container_edits.additional_gids = vec![44];
        assert_eq!(min_version(&grouped), "0.7.0");
        grouped.devices[0].container_edits.additional_gids.clear();
        grouped.container_edits.additional_gids = vec![44];
        assert_eq!(min_version(&grouped), "0.7.0", "spec-level edits count too");
    }
}
