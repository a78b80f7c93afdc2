//! `devinject_build_info{component, version} 1`: which build of which component answers, the
//! usual way to join a version onto other series (`* on(instance) group_left(version)`).

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The metric's name.
pub const NAME: &str = "devinject_build_info";

/// Registers the build-info gauge of `component` (e.g. `device-plugin`) at `version` (the
/// binary's `CARGO_PKG_VERSION`), set to 1.
pub fn register_build_info(registry: &mut Registry, component: &str, version: &str) {
    let info = Family::<Vec<(String, String)>, Gauge>::default();
    info.get_or_create(&vec![
        ("component".to_owned(), component.to_owned()),
        ("version".to_owned(), version.to_owned()),
    ])
    .set(1);
    registry.register(
        NAME,
        "The build of the component serving these metrics",
        info,
    );
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn one_series_set_to_one() {
        let mut registry = Registry::default();
        register_build_info(&mut registry, "nri", "1.2.3");
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("devinject_build_info{component=\"nri\",version=\"1.2.3\"} 1\n"),
            "{text}"
        );
    }
}
