//! The names devinject's DRA driver gives a profile's devices in the API server, made here so
//! that the device plugin reads the kubelet's record of a claim's devices with the same rule
//! the driver publishes them by (docs/dra.md, "From the device plugin to DRA").

/// The DRA driver name when none is configured.
pub const DEFAULT_DRA_DRIVER: &str = "devinject.io";

/// Why a device id makes no DRA device name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnusableDraName {
    /// The name would be longer than a DNS label.
    #[error("over 63 characters")]
    TooLong,
    /// Nothing of the id is left once it is a DNS label.
    #[error("the id has no letter or digit")]
    NoLetterOrDigit,
}

/// The pool of `profile` on `node`: `<node>/<profile>`, unique per driver across the cluster.
pub fn dra_pool(node: &str, profile: &str) -> String {
    format!("{node}/{profile}")
}

/// The DRA device name of device `id` (or a share or partition's id) of `profile`:
/// `<profile>-<id>` as a DNS label, the id lower-cased and anything but `[a-z0-9-]` as `-`.
pub fn dra_device_name(profile: &str, id: &str) -> Result<String, UnusableDraName> {
    let mut name = String::with_capacity(profile.len() + 1 + id.len());
    name.push_str(profile);
    name.push('-');
    for c in id.chars() {
        let c = c.to_ascii_lowercase();
        name.push(if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        });
    }
    let name = name.trim_end_matches('-').to_owned();
    if name.len() > 63 {
        return Err(UnusableDraName::TooLong);
    }
    if name.len() <= profile.len() {
        return Err(UnusableDraName::NoLetterOrDigit);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_name_is_a_dns_label_of_profile_and_id() {
        assert_eq!(dra_device_name("demo", "0").unwrap(), "demo-0");
        assert_eq!(
            dra_device_name("gpu", "0000:3B:00.0").unwrap(),
            "gpu-0000-3b-00-0"
        );
        assert_eq!(dra_device_name("demo", "3@half1").unwrap(), "demo-3-half1");
        assert_eq!(
            dra_device_name("demo", "::"),
            Err(UnusableDraName::NoLetterOrDigit)
        );
        assert_eq!(
            dra_device_name("demo", &"x".repeat(60)),
            Err(UnusableDraName::TooLong)
        );
        assert_eq!(dra_pool("node-a", "demo"), "node-a/demo");
    }
}
