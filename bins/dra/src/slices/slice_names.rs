//! The names of a pool's ResourceSlices: DNS subdomains (Kubernetes' object names,
//! <https://kubernetes.io/docs/concepts/overview/working-with-objects/names/>) made of the node's
//! and the profile's names and a hash of the pool's, stable across restarts so that the
//! publisher finds its own slices again, and apart for every pool and every slice of a pool.

use super::limits::MAX_NAME;
use crate::naming;

/// The name of the slice of `profile` on `node`: `<node>-<profile>-<hash>`, a DNS subdomain of
/// at most 253 characters. The hash (of the pool name) keeps it stable across restarts and
/// apart from another node's and profile's whose names join to the same text (`a-b` + `c` and
/// `a` + `b-c`).
pub fn slice_name(node: &str, profile: &str) -> String {
    let hash = format!(
        "{:08x}",
        fnv1a(naming::pool(node, profile).as_bytes()) as u32
    );
    let mut prefix = subdomain(&format!("{node}-{profile}"));
    let room = MAX_NAME - 1 - hash.len();
    if prefix.len() > room {
        prefix.truncate(room);
        prefix = prefix.trim_end_matches(['-', '.']).to_owned();
    }
    if prefix.is_empty() {
        hash
    } else {
        format!("{prefix}-{hash}")
    }
}

/// The name of the `k`th slice (from 0) of the devices of `profile`'s pool on `node`: the
/// first is [`slice_name`]'s, the others those of `<profile>/<k>`, apart from every profile's
/// (a profile name holds no `/`).
pub fn devices_slice_name(node: &str, profile: &str, k: usize) -> String {
    match k {
        0 => slice_name(node, profile),
        k => slice_name(node, &format!("{profile}/{k}")),
    }
}

/// The name of the `k`th slice (from 0) of the counters of `profile`'s partitioned devices on
/// `node`: those of `<profile>/counters` and `<profile>/counters/<k>`, apart from every
/// devices' slice.
pub fn counters_slice_name(node: &str, profile: &str, k: usize) -> String {
    match k {
        0 => slice_name(node, &format!("{profile}/counters")),
        k => slice_name(node, &format!("{profile}/counters/{k}")),
    }
}

/// `s` as a DNS subdomain: lower case, anything but `[a-z0-9.-]` as `-`, each dot-separated
/// label trimmed of `-` at its ends, empty labels dropped.
fn subdomain(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// 64-bit FNV-1a: a hash that, unlike std's, is the same in every build and release.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes' IsDNS1123Subdomain: at most 253 characters, no limit per label.
    fn is_subdomain(s: &str) -> bool {
        s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    }

    #[test]
    fn slice_names_are_stable_distinct_dns_subdomains() {
        let a = slice_name("node-a", "demo");
        assert_eq!(a, slice_name("node-a", "demo"));
        assert!(
            a.starts_with("node-a-demo-") && a.len() == "node-a-demo-".len() + 8,
            "{a}"
        );
        assert_ne!(slice_name("a-b", "c"), slice_name("a", "b-c"));
        for (node, profile) in [
            ("node-a", "demo"),
            ("Worker_1.Example.COM", "kvm"),
            ("-.x.-", "demo"),
            (&"n".repeat(253), "demo"),
            (
                &format!("{}.{}", "a".repeat(240), "b".repeat(12)),
                "coral-edgetpu",
            ),
        ] {
            let name = slice_name(node, profile);
            assert!(is_subdomain(&name), "{node} {profile}: {name}");
        }
        assert!(slice_name("Worker_1.Example.COM", "kvm").starts_with("worker-1.example.com-kvm-"));
    }

    #[test]
    fn fnv1a_gives_the_published_64_bit_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn subdomain_lowers_maps_and_trims_each_label() {
        assert_eq!(subdomain("Worker_1..-a-.B"), "worker-1.a.b");
        assert_eq!(subdomain("node-a-demo"), "node-a-demo");
        assert_eq!(subdomain("-.-"), "");
    }

    #[test]
    fn a_pools_slices_have_names_apart_the_first_devices_slice_the_pools() {
        assert_eq!(devices_slice_name("n", "demo", 0), slice_name("n", "demo"));
        assert_eq!(
            devices_slice_name("n", "demo", 2),
            slice_name("n", "demo/2")
        );
        assert_eq!(
            counters_slice_name("n", "demo", 0),
            slice_name("n", "demo/counters")
        );
        assert_eq!(
            counters_slice_name("n", "demo", 1),
            slice_name("n", "demo/counters/1")
        );
        let names: std::collections::BTreeSet<String> = (0..3)
            .flat_map(|k| {
                [
                    devices_slice_name("n", "demo", k),
                    counters_slice_name("n", "demo", k),
                ]
            })
            .collect();
        assert_eq!(names.len(), 6);
    }

    #[test]
    fn a_long_name_is_cut_to_the_limit_and_keeps_the_pools_hash() {
        let node = "n".repeat(300);
        let name = slice_name(&node, "demo");
        assert_eq!(name.len(), MAX_NAME);
        let hash = format!(
            "{:08x}",
            fnv1a(naming::pool(&node, "demo").as_bytes()) as u32
        );
        assert!(name.ends_with(&format!("-{hash}")), "{name}");
        assert_eq!(
            slice_name("-", "."),
            hash_of("-", "."),
            "nothing left but the hash"
        );
    }

    fn hash_of(node: &str, profile: &str) -> String {
        format!(
            "{:08x}",
            fnv1a(naming::pool(node, profile).as_bytes()) as u32
        )
    }
}
