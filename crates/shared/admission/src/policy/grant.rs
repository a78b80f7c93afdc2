//! Does what the kubelet granted a container cover what the container asks for?
//!
//! The kubelet's pod-resources API lists, per pod (by name and namespace) and container (by
//! name), the device ids each extended resource got, exactly as the device plugin advertised
//! them; the answer carries that for the container asked about. A shared device is advertised
//! once per replica as `id::N`; the container gets the physical device `id` either way, so both
//! sides are compared as sets of physical ids. A request is honoured only when it names exactly
//! the granted physical devices.

use std::collections::BTreeSet;

use devinject_devices::request::split_replica;
use devinject_devices::Request;
use devinject_kubelet::answer::PodEntry;

/// What the kubelet says one container got of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// The kubelet lists no pod of that name in that namespace.
    PodUnknown,
    /// More than one pod of that name is listed, with different grants (a pod is being
    /// replaced by one of the same name).
    Ambiguous,
    /// The pod is listed, but not this container (ordinary init containers are never listed).
    ContainerUnknown {
        /// The containers the kubelet lists for the pod.
        listed: Vec<String>,
    },
    /// The physical device ids granted (empty when the container got none of the resource).
    Devices(BTreeSet<String>),
}

/// The physical device an advertised id stands for (`id::N` is replica N of `id`).
pub fn physical(id: &str) -> &str {
    split_replica(id).map_or(id, |(base, _)| base)
}

/// The container's grant of `resource`, from the kubelet's entries for its pod.
pub fn granted(entries: &[PodEntry], resource: &str) -> Grant {
    let mut grants = entries.iter().map(|pod| in_pod(pod, resource));
    let Some(first) = grants.next() else {
        return Grant::PodUnknown;
    };
    if grants.all(|g| g == first) {
        first
    } else {
        Grant::Ambiguous
    }
}

fn in_pod(pod: &PodEntry, resource: &str) -> Grant {
    match pod {
        PodEntry::Missing { listed } => Grant::ContainerUnknown {
            listed: listed.clone(),
        },
        PodEntry::Found { devices } => Grant::Devices(
            devices
                .get(resource)
                .into_iter()
                .flatten()
                .map(|id| physical(id).to_owned())
                .collect(),
        ),
    }
}

/// Why a request is not covered by the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// `all` or `none`: the device plugin never writes either.
    Keyword(&'static str),
    /// A list naming other devices than those granted.
    Devices {
        /// The physical ids the request names.
        requested: BTreeSet<String>,
    },
}

/// Checks a parsed request against the granted physical ids. `void` asks for nothing and is
/// always fine.
pub fn check(request: &Request, granted: &BTreeSet<String>) -> Result<(), Mismatch> {
    match request {
        Request::Void => Ok(()),
        Request::None => Err(Mismatch::Keyword("none")),
        Request::All => Err(Mismatch::Keyword("all")),
        Request::List(items) => {
            let requested: BTreeSet<String> =
                items.iter().map(|i| physical(i).to_owned()).collect();
            if &requested == granted {
                Ok(())
            } else {
                Err(Mismatch::Devices { requested })
            }
        }
    }
}

/// `a, b` or `none`, for messages.
pub fn describe(ids: &BTreeSet<String>) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|i| (*i).to_owned()).collect()
    }

    const DEMO: &str = "devinject.io/demo";

    #[test]
    fn finds_the_resource_or_says_which_containers_are_listed() {
        let p = PodEntry::found(&[(DEMO, &["0", "1"]), ("other.io/x", &["9"])]);
        assert_eq!(
            granted(std::slice::from_ref(&p), DEMO),
            Grant::Devices(set(&["0", "1"]))
        );
        assert_eq!(granted(&[p], "third.io/y"), Grant::Devices(set(&[])));
        let missing = PodEntry::Missing {
            listed: vec!["side".into(), "main".into()],
        };
        assert_eq!(
            granted(&[missing], DEMO),
            Grant::ContainerUnknown {
                listed: vec!["side".into(), "main".into()]
            }
        );
        assert_eq!(granted(&[], DEMO), Grant::PodUnknown);
    }

    #[test]
    fn replicas_map_to_physical_devices() {
        let p = PodEntry::found(&[(DEMO, &["0::1", "0::3", "2::0"])]);
        let Grant::Devices(g) = granted(&[p], DEMO) else {
            panic!("devices")
        };
        assert_eq!(g, set(&["0", "2"]));
        // The request may name the replicas or the physical ids.
        for value in ["0::1,2::0", "2,0", "0::3,2::0,0::1"] {
            let r = Request::parse(Some(value)).unwrap();
            assert_eq!(check(&r, &g), Ok(()), "{value}");
        }
        assert_eq!(physical("a::b"), "a::b", "not a replica suffix: kept as is");
    }

    #[test]
    fn only_the_exact_grant_passes() {
        let g = set(&["0", "1"]);
        let ok = Request::parse(Some("1,0")).unwrap();
        assert_eq!(check(&ok, &g), Ok(()));
        for value in ["0", "0,1,2", "2,3"] {
            let r = Request::parse(Some(value)).unwrap();
            assert!(
                matches!(check(&r, &g), Err(Mismatch::Devices { .. })),
                "{value}"
            );
        }
        assert_eq!(check(&Request::All, &g), Err(Mismatch::Keyword("all")));
        assert_eq!(
            check(&Request::None, &set(&[])),
            Err(Mismatch::Keyword("none"))
        );
        assert_eq!(check(&Request::Void, &set(&[])), Ok(()));
        // Granted nothing, asks for a device.
        let r = Request::parse(Some("0")).unwrap();
        assert_eq!(
            check(&r, &set(&[])),
            Err(Mismatch::Devices {
                requested: set(&["0"])
            })
        );
    }

    #[test]
    fn same_named_pods_must_agree() {
        let old = PodEntry::found(&[(DEMO, &["0"])]);
        let new = PodEntry::found(&[(DEMO, &["1"])]);
        assert_eq!(granted(&[old.clone(), new.clone()], DEMO), Grant::Ambiguous);
        assert_eq!(
            granted(&[old.clone(), old.clone()], DEMO),
            Grant::Devices(set(&["0"]))
        );
        // Agreeing on this resource is enough.
        let other = PodEntry::found(&[(DEMO, &["0"]), ("other.io/x", &["9"])]);
        assert_eq!(granted(&[old, other], DEMO), Grant::Devices(set(&["0"])));
        let gone = PodEntry::Missing { listed: vec![] };
        assert_eq!(granted(&[new, gone], DEMO), Grant::Ambiguous);
    }

    #[test]
    fn describes_sets() {
        assert_eq!(describe(&set(&[])), "none");
        assert_eq!(describe(&set(&["b", "a"])), "a, b");
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::{btree_set, vec};
    use proptest::prelude::*;

    use super::*;

    fn id() -> impl Strategy<Value = String> {
        ("[0-3]", proptest::option::of(0u32..3)).prop_map(|(id, r)| match r {
            Some(r) => format!("{id}::{r}"),
            None => id,
        })
    }

    proptest! {
        #[test]
        fn a_request_passes_exactly_when_it_names_the_granted_devices(
            granted in btree_set(id(), 0..4),
            asked in vec(id(), 1..5),
        ) {
            // The oracle, written apart from `physical`: a replica id `d::n` is device `d`.
            let device = |s: &String| s.split_once("::").map_or(s.as_str(), |(d, _)| d).to_owned();
            let granted_physical: BTreeSet<String> = granted.iter().map(device).collect();
            let asked_physical: BTreeSet<String> = asked.iter().map(device).collect();
            let request = Request::parse(Some(&asked.join(","))).unwrap();
            let ok = check(&request, &granted_physical).is_ok();
            prop_assert_eq!(ok, asked_physical == granted_physical);
            prop_assert!(check(&Request::All, &granted_physical).is_err());
            prop_assert!(check(&Request::None, &granted_physical).is_err());
        }
    }
}
