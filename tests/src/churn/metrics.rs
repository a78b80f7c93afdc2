//! A scrape of each running component's Prometheus `/metrics` at the end of the run, for the
//! report.
//!
//! The components serve it where `--metrics-address` says (device plugin 9470, NRI plugin
//! 9471, webhook 9472, DRA driver 9473 by default). The cluster harness starts each node's
//! daemons on a free port of their own (two nodes' plugins cannot share the default), which
//! [`crate::cluster::Node`] keeps; [`scrape`] reads it through [`crate::scrape::get`].
//! [`node_refusals`] reads the device plugin's count of the refusals the node's decision log
//! holds.

use crate::cluster::Cluster;

/// One component's scrape (or why there is none).
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The component and its node.
    pub component: String,
    /// The `/metrics` body, or why it could not be read.
    pub text: String,
}

/// The scrape of the device plugin, `devinject-nri` and `devinject-dra` on every node of
/// `cluster`.
pub fn scrape(cluster: &Cluster) -> Vec<Scrape> {
    let mut out = Vec::new();
    for node in cluster.nodes() {
        for (binary, running, addr) in [
            (
                "devinject-device-plugin",
                node.plugin_pid().is_some(),
                node.plugin_metrics(),
            ),
            (
                "devinject-nri",
                node.nri_plugin_pid().is_some(),
                node.nri_metrics(),
            ),
        ] {
            if !running {
                continue;
            }
            let component = format!("{binary} on {}", node.name());
            let text = match addr {
                Some(addr) => crate::scrape::get(addr)
                    .unwrap_or_else(|e| format!("cannot read http://{addr}/metrics: {e:#}")),
                None => format!("not scraped: {binary} runs without a metrics address"),
            };
            out.push(Scrape { component, text });
        }
        // devinject-dra serves on a loopback port of its own, which it logs.
        if node.dra_plugin_pid().is_some() {
            out.push(Scrape {
                component: format!("devinject-dra on {}", node.name()),
                text: crate::scrape::from_log(&node.dra_log()).unwrap_or_else(|e| {
                    let why = e.to_string();
                    let why = why.lines().next().unwrap_or_default().to_owned();
                    format!("cannot read devinject-dra's /metrics: {why}")
                }),
            });
        }
    }
    out
}

/// The refusals of engine path `path` (`shim`, `nri`) a device plugin's scrape `text` counted
/// from its node's decision log (`devinject_node_refusals_total`, every reason).
pub fn node_refusals(text: &str, path: &str) -> u64 {
    let series = format!("devinject_node_refusals_total{{path=\"{path}\",");
    text.lines()
        .filter(|l| l.starts_with(&series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_refusals_add_up_every_reason_of_one_path() {
        let text = "devinject_node_refusals_total{path=\"nri\",reason=\"policy\"} 3\n\
                    devinject_node_refusals_total{path=\"nri\",reason=\"request\"} 2\n\
                    devinject_node_refusals_total{path=\"shim\",reason=\"policy\"} 7\n";
        assert_eq!(node_refusals(text, "nri"), 5);
        assert_eq!(node_refusals(text, "hook"), 0);
    }
}
