//! A scrape of each running component's Prometheus `/metrics` at the end of the run, for the
//! report.
//!
//! The components serve it where their binary takes `--metrics-address` (device plugin 9470,
//! NRI plugin 9471, webhook 9472, DRA driver 9473 by default). The cluster harness starts each
//! node's daemons on a free port of their own (two nodes' plugins cannot share the default),
//! and [`scrape`] takes the address from the running process's command line and reads it
//! through [`crate::scrape::get`]. [`node_refusals`] reads the device plugin's count of the
//! refusals the node's decision log holds.

use crate::cluster::Cluster;
use std::net::SocketAddr;

/// The flag that names a component's metrics address.
const FLAG: &str = "--metrics-address";

/// One component's scrape (or why there is none).
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The component and its node.
    pub component: String,
    /// The `/metrics` body, or why it could not be read.
    pub text: String,
}

/// The scrape of the device plugin and `devinject-nri` on every node of `cluster`.
pub fn scrape(cluster: &Cluster) -> Vec<Scrape> {
    let mut out = Vec::new();
    for node in cluster.nodes() {
        for (binary, pid) in [
            ("devinject-device-plugin", node.plugin_pid()),
            ("devinject-nri", node.nri_plugin_pid()),
        ] {
            let Some(pid) = pid else {
                continue;
            };
            let component = format!("{binary} on {}", node.name());
            let text = match address_of(pid).and_then(|a| a.parse::<SocketAddr>().ok()) {
                Some(addr) => crate::scrape::get(addr)
                    .unwrap_or_else(|e| format!("cannot read http://{addr}/metrics: {e:#}")),
                None => format!("not scraped: {binary} was started without {FLAG}"),
            };
            out.push(Scrape { component, text });
        }
    }
    out
}

/// The `--metrics-address` value on process `pid`'s command line.
fn address_of(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix(&format!("{FLAG}="))
            .map(str::to_owned)
            .or_else(|| (a == FLAG).then(|| args.get(i + 1).cloned()).flatten())
    })
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
