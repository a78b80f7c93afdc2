//! The `--metrics-address` flag: where a component serves `/metrics`, or `off`.
//!
//! Accepted: `off`; an IP address alone (`127.0.0.1`, `fd00::5`), which takes the component's
//! default port; an IP address and a port (`10.1.2.3:9470`, `[fd00::5]:9470`). Host names are
//! not: a bind address resolved through DNS could land on an interface nobody meant. The bare
//! IP form is what the manifests pass (`$(POD_IP)` from the downward API), so that an IPv6 pod
//! address needs no brackets.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The default ports, fixed: the manifests declare them and other tools rely on them.
pub mod port {
    /// `devinject-device-plugin`.
    pub const DEVICE_PLUGIN: u16 = 9470;
    /// `devinject-nri`.
    pub const NRI: u16 = 9471;
    /// `devinject-webhook`.
    pub const WEBHOOK: u16 = 9472;
    /// `devinject-dra`.
    pub const DRA: u16 = 9473;
}

/// The address a binary binds when given no flag: loopback, so that nothing is exposed unless
/// a deployment asks (the manifests bind the pod IP).
pub const DEFAULT_IP: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Where to serve `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAddress {
    /// Serve no metrics.
    Off,
    /// Serve on this address.
    At(SocketAddr),
}

/// Why a `--metrics-address` value was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Neither `off`, an IP address, nor an IP address and a port.
    #[error(
        "metrics address {value:?} is not `off`, an IP address (127.0.0.1, fd00::5) or an IP \
         address and a port (10.0.0.5:9470, [fd00::5]:9470)"
    )]
    Invalid {
        /// The value as given, cut to 64 characters.
        value: String,
    },
}

impl MetricsAddress {
    /// The loopback address on `port`: a binary's default.
    pub fn loopback(port: u16) -> Self {
        Self::At(SocketAddr::new(DEFAULT_IP, port))
    }

    /// Parses a flag's value; an IP address without a port takes `default_port`.
    pub fn parse(value: &str, default_port: u16) -> Result<Self, AddressError> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("off") {
            return Ok(Self::Off);
        }
        if let Ok(address) = value.parse::<SocketAddr>() {
            return Ok(Self::At(address));
        }
        if let Ok(ip) = value.parse::<IpAddr>() {
            return Ok(Self::At(SocketAddr::new(ip, default_port)));
        }
        Err(AddressError::Invalid {
            value: value.chars().take(64).collect(),
        })
    }
}

impl std::fmt::Display for MetricsAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::At(address) => write!(f, "{address}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_an_ip_alone_or_an_ip_and_a_port() {
        assert_eq!(MetricsAddress::parse("off", 1), Ok(MetricsAddress::Off));
        assert_eq!(MetricsAddress::parse("OFF", 1), Ok(MetricsAddress::Off));
        assert_eq!(
            MetricsAddress::parse("10.1.2.3", port::NRI)
                .unwrap()
                .to_string(),
            "10.1.2.3:9471"
        );
        assert_eq!(
            MetricsAddress::parse("fd00::5", port::DRA)
                .unwrap()
                .to_string(),
            "[fd00::5]:9473"
        );
        assert_eq!(
            MetricsAddress::parse("[fd00::5]:1234", port::DRA)
                .unwrap()
                .to_string(),
            "[fd00::5]:1234"
        );
        assert_eq!(
            MetricsAddress::parse("0.0.0.0:0", 9).unwrap().to_string(),
            "0.0.0.0:0"
        );
    }

    #[test]
    fn the_default_is_loopback_on_the_components_port() {
        assert_eq!(
            MetricsAddress::loopback(port::DEVICE_PLUGIN).to_string(),
            "127.0.0.1:9470"
        );
    }

    #[test]
    fn host_names_and_junk_are_refused_with_a_bounded_excerpt() {
        for bad in [
            "localhost",
            "localhost:9470",
            "",
            "10.0.0.1:",
            "1.2.3.4:99999",
            "on",
        ] {
            assert!(MetricsAddress::parse(bad, 1).is_err(), "{bad:?}");
        }
        let long = "x".repeat(1000);
        let AddressError::Invalid { value } = MetricsAddress::parse(&long, 1).unwrap_err();
        assert_eq!(value.len(), 64);
    }
}
