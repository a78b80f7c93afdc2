//! Scraping a running component's Prometheus `/metrics`, as Prometheus does: over TCP, from the
//! address the component logged when it bound it (tests start components on port 0, so that
//! parallel tests never share a port).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// The flag that makes a component serve metrics on a port of its own choosing on loopback.
pub const ANY_LOOPBACK_PORT: &str = "--metrics-address=127.0.0.1:0";

/// The address in a component's log line `serving metrics address=...`.
pub fn address_in_log(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter(|l| l.contains("serving metrics"))
        .find_map(|l| {
            let rest = &l[l.find("address=")? + "address=".len()..];
            rest.split_whitespace().next()?.parse().ok()
        })
}

/// The body of `GET /metrics` at `address`, checked to be a 200 in the OpenMetrics format.
pub fn get(address: SocketAddr) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .with_context(|| format!("connect to {address}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .with_context(|| format!("read http://{address}/metrics"))?;
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        bail!("http://{address}/metrics: no HTTP answer: {answer:?}");
    };
    if !head.starts_with("HTTP/1.1 200 ")
        || !head.contains("Content-Type: application/openmetrics-text; version=1.0.0")
    {
        bail!("http://{address}/metrics answered:\n{head}");
    }
    Ok(body.to_owned())
}

/// The scrape of the component whose log is `log`.
pub fn from_log(log: &str) -> Result<String> {
    let address = address_in_log(log)
        .with_context(|| format!("no `serving metrics` line in the log:\n{log}"))?;
    get(address)
}

/// The value of the series `series` (name and labels exactly as encoded, e.g.
/// `devinject_nri_refusals_total{reason="policy"}`), if present.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_comes_from_the_log_line() {
        let log = "2026-01-01T00:00:00Z  INFO serving metrics address=127.0.0.1:41234 path=\"/metrics\"\n";
        assert_eq!(
            address_in_log(log),
            Some("127.0.0.1:41234".parse().unwrap())
        );
        assert_eq!(address_in_log("INFO serving\n"), None);
    }

    #[test]
    fn a_series_value_is_read_by_its_exact_name_and_labels() {
        let text = "a_total{r=\"x\"} 3\na_total 5\na_total_more 7\n";
        assert_eq!(value(text, "a_total{r=\"x\"}"), Some(3.0));
        assert_eq!(value(text, "a_total"), Some(5.0));
        assert_eq!(value(text, "a_tot"), None);
    }
}
