//! What a container asked for: the value of `<NAME>_VISIBLE_DEVICES` or our annotation.
//!
//! Grammar (whitespace around items is ignored):
//! - unset, empty or `void`: nothing of this kind, not even its libraries;
//! - `none`: no device, but the kind's libraries, binaries, files and env;
//! - `all`: every discovered device;
//! - a comma list of device ids, e.g. `0,2` or `GPU-4a1c,GPU-77e0`. An id may carry a
//!   replica suffix `::N` (how the device plugin advertises shared devices); it maps back to the
//!   physical device.
//!
//! How an item is resolved is the caller's choice ([`Resolve`]): a device id only, or, for a plain
//! `docker run` user on a profile whose ids are not numbers, an all-digit item that names no id
//! may be a position in discovery order (`NVIDIA_VISIBLE_DEVICES=0` on UUID-named GPUs). Anything
//! the kubelet granted, an annotation, and every profile whose ids are numbers resolve as ids
//! only: a granted `1` on a host with `accel0` and `accel2` must never become `accel2`.
//!
//! Unknown ids, duplicates, empty items and oversize input are errors naming the offending value
//! (through [`Excerpt`], so a message stays short whatever the value): a bad request never
//! injects anything.

use crate::excerpt::Excerpt;
use crate::inventory::Device;
use crate::names::DeviceId;

/// The longest request value accepted.
pub const MAX_REQUEST_BYTES: usize = 4096;
/// The most items a request may list.
pub const MAX_REQUEST_ITEMS: usize = 256;

/// Why a request was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum RequestError {
    /// The value is longer than [`MAX_REQUEST_BYTES`].
    #[error("request is {len} bytes long, over the limit of {MAX_REQUEST_BYTES}: list fewer devices or use `all`")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// The list has more than [`MAX_REQUEST_ITEMS`] items.
    #[error("request lists {count} devices, over the limit of {MAX_REQUEST_ITEMS}")]
    TooMany {
        /// How many items.
        count: usize,
    },
    /// An item is empty (`0,,1`, a trailing comma).
    #[error("request {:?} has an empty item: separate ids with single commas", Excerpt(.value))]
    EmptyItem {
        /// The whole value.
        value: String,
    },
    /// An item has characters no id can have.
    #[error("request item {:?} is malformed: ids use A-Z a-z 0-9 . _ - : and an optional ::N replica suffix", Excerpt(.item))]
    Malformed { item: String },
    /// `all`, `none` or `void` mixed into a list.
    #[error("request item {:?} cannot be combined with other items: use it alone", Excerpt(.item))]
    KeywordInList {
        /// The keyword.
        item: String,
    },
    /// An item names no discovered device.
    #[error("unknown device {:?}: known ids are {known}", Excerpt(.item))]
    Unknown {
        item: String,
        /// The discovered ids, comma-separated.
        known: String,
    },
    /// An item the kubelet granted names no discovered device: it was unplugged, failed or
    /// renamed between the allocation and the container start.
    #[error("device {} was granted but is gone (unplugged or failed since the kubelet allocated it; known ids are {known}): delete the pod so that it is scheduled again", Excerpt(.item))]
    Gone {
        item: String,
        /// The discovered ids, comma-separated.
        known: String,
    },
    /// Two items name the same device.
    #[error("device {:?} is requested twice (as {:?} and {:?})", Excerpt(.item), Excerpt(.first), Excerpt(.item))]
    Duplicate {
        /// The second item.
        item: String,
        /// The first item naming the same device.
        first: String,
    },
    /// A replica suffix out of range.
    #[error("request item {:?}: replica {replica} is out of range (the profile shares each device {replicas} times)", Excerpt(.item))]
    Replica {
        item: String,
        /// The replica number.
        replica: u32,
        /// The profile's replica count.
        replicas: u32,
    },
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Nothing of this kind (unset, empty, `void`).
    Void,
    /// No devices, but the kind's files and env (`none`).
    None,
    /// Every device (`all`).
    All,
    /// These items, in order.
    List(Vec<String>),
}

/// How the items of a list resolve to devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resolve {
    /// Device ids only; an unknown id is [`RequestError::Unknown`].
    #[default]
    Ids,
    /// Device ids only, and the kubelet granted them: an unknown id is
    /// [`RequestError::Gone`].
    Granted,
    /// Device ids first; an all-digit item that names no id is a position in discovery order,
    /// but only when no discovered id is all digits (so a position can never be read as
    /// another device's id, or the other way round). For requests a trusted caller wrote
    /// itself (the request variable under the `env` policy) on profiles whose ids are not
    /// numbers.
    IdsOrPositions,
}

/// The devices a request selected: indices into the inventory, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Inventory indices.
    pub indices: Vec<usize>,
}

impl Request {
    /// Parses a request value; `None` (the variable is unset) is [`Request::Void`].
    pub fn parse(value: Option<&str>) -> Result<Self, RequestError> {
        let Some(value) = value else {
            return Ok(Self::Void);
        };
        if value.len() > MAX_REQUEST_BYTES {
            return Err(RequestError::TooLong { len: value.len() });
        }
        let trimmed = value.trim();
        match trimmed {
            "" | "void" => return Ok(Self::Void),
            "none" => return Ok(Self::None),
            "all" => return Ok(Self::All),
            _ => {}
        }
        let items: Vec<&str> = trimmed.split(',').map(str::trim).collect();
        if items.len() > MAX_REQUEST_ITEMS {
            return Err(RequestError::TooMany { count: items.len() });
        }
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if item.is_empty() {
                return Err(RequestError::EmptyItem {
                    value: value.to_owned(),
                });
            }
            if matches!(item, "all" | "none" | "void") {
                return Err(RequestError::KeywordInList { item: item.into() });
            }
            let ok = item.len() <= 80
                && item
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
            if !ok {
                return Err(RequestError::Malformed { item: item.into() });
            }
            split_replica(item)?;
            out.push(item.to_owned());
        }
        Ok(Self::List(out))
    }

    /// True when the container gets anything of this kind (devices or files).
    pub fn wants_anything(&self) -> bool {
        !matches!(self, Self::Void)
    }

    /// Resolves the request against discovered devices, each item as `resolve` says; `id::N`
    /// names replica N of device `id`.
    pub fn select(
        &self,
        devices: &[Device],
        replicas: u32,
        resolve: Resolve,
    ) -> Result<Selection, RequestError> {
        let items = match self {
            Self::Void | Self::None => return Ok(Selection::default()),
            Self::All => {
                return Ok(Selection {
                    indices: (0..devices.len()).collect(),
                })
            }
            Self::List(items) => items,
        };
        let positions = resolve == Resolve::IdsOrPositions
            && !devices.iter().any(|d| all_digits(d.id.as_str()));
        let mut indices: Vec<usize> = Vec::with_capacity(items.len());
        let mut firsts: Vec<&str> = Vec::with_capacity(items.len());
        for item in items {
            let (base, replica) = split_replica(item)?;
            if let Some(r) = replica {
                if r >= replicas {
                    return Err(RequestError::Replica {
                        item: item.clone(),
                        replica: r,
                        replicas,
                    });
                }
            }
            let found = devices.iter().position(|d| d.answers_to(base)).or_else(|| {
                if !positions || !all_digits(base) {
                    return None;
                }
                let idx: usize = base.parse().ok()?;
                (idx < devices.len()).then_some(idx)
            });
            let Some(idx) = found else {
                let (item, known) = (item.clone(), known_ids(devices));
                return Err(match resolve {
                    Resolve::Granted => RequestError::Gone { item, known },
                    Resolve::Ids | Resolve::IdsOrPositions => RequestError::Unknown { item, known },
                });
            };
            if let Some(pos) = indices.iter().position(|&i| i == idx) {
                // Two replicas of one shared device are one physical device: fine, once.
                if replica.is_some() && split_replica(firsts[pos])?.1.is_some() {
                    continue;
                }
                return Err(RequestError::Duplicate {
                    item: item.clone(),
                    first: firsts[pos].to_owned(),
                });
            }
            indices.push(idx);
            firsts.push(item);
        }
        Ok(Selection { indices })
    }
}

/// Splits `id::N` into the physical device id and the replica number; a plain id has none.
/// The device plugin advertises replica N of a shared device as `id::N`; the kubelet's
/// pod-resources API reports those ids, and the hook's policy maps them back with this.
pub fn split_replica(item: &str) -> Result<(&str, Option<u32>), RequestError> {
    match item.rsplit_once("::") {
        None => Ok((item, None)),
        Some((base, n)) => {
            let r = n
                .parse::<u32>()
                .ok()
                .filter(|_| !base.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| RequestError::Malformed { item: item.into() })?;
            Ok((base, Some(r)))
        }
    }
}

/// The replica id the device plugin advertises for replica `n` of `id`.
pub fn replica_id(id: &str, n: u32) -> String {
    format!("{id}::{n}")
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn known_ids(devices: &[Device]) -> String {
    if devices.is_empty() {
        return "(none discovered)".into();
    }
    let ids: Vec<String> = devices
        .iter()
        .take(16)
        .map(|d| match d.aliases.as_slice() {
            [] => d.id.to_string(),
            aliases => {
                let aliases: Vec<&str> = aliases.iter().map(DeviceId::as_str).collect();
                format!("{} ({})", d.id, aliases.join(", "))
            }
        })
        .collect();
    let more = if devices.len() > 16 { ", ..." } else { "" };
    format!("{}{more}", ids.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::DeviceId;

    /// An inventory of devices with `ids`, named `accel<index>`.
    pub(super) fn devs(ids: &[impl AsRef<str>]) -> Vec<Device> {
        ids.iter()
            .enumerate()
            .map(|(index, id)| Device {
                id: DeviceId::new(id.as_ref()).expect("valid test id"),
                index,
                name: format!("accel{index}"),
                nodes: vec![],
                numa_node: None,
                healthy: true,
                attributes: Default::default(),
                aliases: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn keywords() {
        assert_eq!(Request::parse(None), Ok(Request::Void));
        assert_eq!(Request::parse(Some("")), Ok(Request::Void));
        assert_eq!(Request::parse(Some(" void ")), Ok(Request::Void));
        assert_eq!(Request::parse(Some("none")), Ok(Request::None));
        assert_eq!(Request::parse(Some("all")), Ok(Request::All));
        assert!(!Request::Void.wants_anything());
        assert!(Request::None.wants_anything());
    }

    #[test]
    fn lists_by_id_and_position() {
        let d = devs(&["GPU-a", "GPU-b", "GPU-c"]);
        let r = Request::parse(Some("GPU-c, 0")).unwrap();
        assert_eq!(
            r.select(&d, 1, Resolve::IdsOrPositions).unwrap().indices,
            [2, 0]
        );
        let all = Request::All.select(&d, 1, Resolve::Ids).unwrap();
        assert_eq!(all.indices, [0, 1, 2]);
        assert!(Request::None
            .select(&d, 1, Resolve::Ids)
            .unwrap()
            .indices
            .is_empty());
    }

    #[test]
    fn positions_only_when_the_caller_allows_them() {
        let d = devs(&["GPU-a", "GPU-b"]);
        let r = Request::parse(Some("1")).unwrap();
        for resolve in [Resolve::Ids, Resolve::Granted] {
            assert!(
                r.select(&d, 1, resolve).is_err(),
                "{resolve:?} read an item as a position"
            );
        }
    }

    #[test]
    fn ids_win_over_indices() {
        // Device "1" is at index 0: "1" means that device, not index 1.
        let d = devs(&["1", "0"]);
        let r = Request::parse(Some("1")).unwrap();
        for resolve in [Resolve::Ids, Resolve::Granted, Resolve::IdsOrPositions] {
            assert_eq!(r.select(&d, 1, resolve).unwrap().indices, [0]);
        }
    }

    /// On a host with accel0 and accel2 (accel1 unplugged), a container granted `1` must not get
    /// accel2, which may be another pod's.
    #[test]
    fn a_missing_numeric_id_is_never_read_as_a_position() {
        let d = devs(&["0", "2"]);
        let r = Request::parse(Some("1")).unwrap();
        assert_eq!(
            r.select(&d, 1, Resolve::Granted).unwrap_err(),
            RequestError::Gone {
                item: "1".into(),
                known: "0, 2".into()
            }
        );
        // Not even a caller that allows positions gets one when ids are numbers.
        assert_eq!(
            r.select(&d, 1, Resolve::IdsOrPositions).unwrap_err(),
            RequestError::Unknown {
                item: "1".into(),
                known: "0, 2".into()
            }
        );
        let msg = RequestError::Gone {
            item: "1".into(),
            known: "0, 2".into(),
        }
        .to_string();
        assert!(msg.starts_with("device 1 was granted but is gone"), "{msg}");
    }

    #[test]
    fn malformed_lists_name_the_value() {
        let cases: &[(&str, &str)] = &[
            ("0,,1", "empty item"),
            ("0,", "empty item"),
            ("0;1", "\"0;1\""),
            ("../x", "\"../x\""),
            ("0 1", "\"0 1\""),
            ("all,0", "\"all\""),
            ("x::", "\"x::\""),
            ("::1", "\"::1\""),
        ];
        for (value, needle) in cases {
            let err = Request::parse(Some(value)).unwrap_err().to_string();
            assert!(err.contains(needle), "{value:?}: {err}");
        }
    }

    #[test]
    fn oversize_is_rejected() {
        let long = "0,".repeat(3000);
        assert!(matches!(
            Request::parse(Some(&long)),
            Err(RequestError::TooLong { .. })
        ));
        let many = vec!["1"; 300].join(",");
        assert!(matches!(
            Request::parse(Some(&many)),
            Err(RequestError::TooMany { count: 300 })
        ));
    }

    /// The bounds hold exactly: at the limit accepted, one past it refused.
    #[test]
    fn bounds_are_exact() {
        let items = |n: usize| {
            (0..n)
                .map(|i| format!("d{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert!(matches!(
            Request::parse(Some(&items(MAX_REQUEST_ITEMS))),
            Ok(Request::List(l)) if l.len() == MAX_REQUEST_ITEMS
        ));
        assert_eq!(
            Request::parse(Some(&items(MAX_REQUEST_ITEMS + 1))),
            Err(RequestError::TooMany {
                count: MAX_REQUEST_ITEMS + 1
            })
        );
        let padded = |len: usize| format!("{}0", " ".repeat(len - 1));
        assert_eq!(
            Request::parse(Some(&padded(MAX_REQUEST_BYTES))),
            Ok(Request::List(vec!["0".into()]))
        );
        assert_eq!(
            Request::parse(Some(&padded(MAX_REQUEST_BYTES + 1))),
            Err(RequestError::TooLong {
                len: MAX_REQUEST_BYTES + 1
            })
        );
        let id = |len: usize| "a".repeat(len);
        assert!(Request::parse(Some(&id(80))).is_ok());
        assert!(matches!(
            Request::parse(Some(&id(81))),
            Err(RequestError::Malformed { .. })
        ));
    }

    /// An unknown id's message lists at most 16 known ids, and says when there are more.
    #[test]
    fn known_ids_are_listed_up_to_sixteen() {
        let names = |n: usize| (0..n).map(|i| format!("g{i}")).collect::<Vec<_>>();
        let r = Request::parse(Some("x")).unwrap();
        let known = |n: usize| match r.select(&devs(&names(n)), 1, Resolve::Ids) {
            Err(RequestError::Unknown { known, .. }) => known,
            other => panic!("{other:?}"),
        };
        assert_eq!(known(16), names(16).join(", "));
        assert_eq!(known(17), format!("{}, ...", names(16).join(", ")));
        assert_eq!(known(0), "(none discovered)");
    }

    #[test]
    fn unknown_and_duplicate_ids_are_errors() {
        let d = devs(&["0", "1"]);
        let err = Request::parse(Some("0,7"))
            .unwrap()
            .select(&d, 1, Resolve::Ids)
            .unwrap_err();
        assert_eq!(
            err,
            RequestError::Unknown {
                item: "7".into(),
                known: "0, 1".into()
            }
        );
        let err = Request::parse(Some("1,1"))
            .unwrap()
            .select(&d, 1, Resolve::Ids)
            .unwrap_err();
        assert!(matches!(err, RequestError::Duplicate { .. }));
    }

    #[test]
    fn replicas_map_back_to_the_physical_device() {
        let d = devs(&["0", "1"]);
        let r = Request::parse(Some("1::0,1::3,0::2")).unwrap();
        assert_eq!(r.select(&d, 4, Resolve::Ids).unwrap().indices, [1, 0]);
        let err = Request::parse(Some("1::4"))
            .unwrap()
            .select(&d, 4, Resolve::Ids)
            .unwrap_err();
        assert!(matches!(err, RequestError::Replica { replica: 4, .. }));
        // A plain id and a replica of the same device is still a duplicate.
        let err = Request::parse(Some("1,1::0"))
            .unwrap()
            .select(&d, 4, Resolve::Ids)
            .unwrap_err();
        assert!(matches!(err, RequestError::Duplicate { .. }));
        assert_eq!(replica_id("GPU-a", 3), "GPU-a::3");
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    /// A valid request item: an id, optionally with a replica suffix.
    fn item() -> impl Strategy<Value = String> {
        ("[A-Za-z0-9._-]{1,12}", proptest::option::of(0u32..2000))
            .prop_filter("keywords are not ids", |(id, _)| {
                !matches!(id.as_str(), "all" | "none" | "void")
            })
            .prop_map(|(id, r)| match r {
                Some(n) => format!("{id}::{n}"),
                None => id,
            })
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = Request::parse(Some(&s));
        }

        #[test]
        fn parse_never_panics_on_near_misses(s in "[a-z0-9 ,:._;/-]{0,80}") {
            if let Ok(Request::List(items)) = Request::parse(Some(&s)) {
                prop_assert!(!items.is_empty());
                for i in &items {
                    prop_assert!(s.contains(i.as_str()));
                    prop_assert!(split_replica(i).is_ok());
                }
            }
        }

        #[test]
        fn lists_round_trip(items in vec(item(), 1..40), pad in vec(" {0,2}", 80)) {
            let value: Vec<String> = items
                .iter()
                .enumerate()
                .map(|(i, it)| format!("{}{it}{}", pad[2 * i], pad[2 * i + 1]))
                .collect();
            let parsed = Request::parse(Some(&value.join(","))).unwrap();
            prop_assert_eq!(&parsed, &Request::List(items.clone()));
            let again = Request::parse(Some(&items.join(","))).unwrap();
            prop_assert_eq!(again, parsed);
        }

        #[test]
        fn errors_name_the_offending_item(
            good in vec(item(), 0..5),
            bad in "[A-Za-z0-9]{1,4}[;/ $\"'\\\\\u{e9}][A-Za-z0-9]{1,4}",
            at in 0usize..5,
        ) {
            let mut items = good;
            let at = at.min(items.len());
            items.insert(at, bad.clone());
            let value = items.join(",");
            let err = Request::parse(Some(&value)).unwrap_err().to_string();
            prop_assert!(err.contains(&format!("{:?}", bad.trim())), "{} does not name {:?}", err, bad);
        }

        #[test]
        fn selections_are_sound(
            ids in proptest::collection::btree_set("[A-Za-z0-9._-]{1,6}", 0..8),
            picks in vec((0usize..12, proptest::option::of(0u32..4), any::<bool>()), 1..10),
            replicas in 1u32..5,
            resolve in prop_oneof![Just(Resolve::Ids), Just(Resolve::Granted), Just(Resolve::IdsOrPositions)],
        ) {
            let ids: Vec<String> = ids.into_iter().collect();
            let positions = resolve == Resolve::IdsOrPositions
                && !ids.iter().any(|id| id.bytes().all(|b| b.is_ascii_digit()));
            let devs = super::tests::devs(&ids);
            // Items: by id, by index, or unknown.
            let items: Vec<String> = picks
                .iter()
                .map(|(n, r, by_id)| {
                    let base = match (ids.get(*n), by_id) {
                        (Some(id), true) => id.clone(),
                        _ => n.to_string(),
                    };
                    r.map_or(base.clone(), |r| format!("{base}::{r}"))
                })
                .collect();
            let request = match Request::parse(Some(&items.join(","))) {
                Ok(r) => r,
                Err(e) => {
                    // Only a generated id that is a keyword can fail here.
                    prop_assert!(matches!(e, RequestError::KeywordInList { .. }), "{}", e);
                    return Ok(());
                }
            };
            match request.select(&devs, replicas, resolve) {
                Ok(sel) => {
                    let mut seen = std::collections::BTreeSet::new();
                    for &i in &sel.indices {
                        prop_assert!(i < devs.len());
                        prop_assert!(seen.insert(i), "index {} selected twice", i);
                        let named = items.iter().any(|it| {
                            let base = split_replica(it).unwrap().0;
                            base == devs[i].id.as_str() || (positions && base == i.to_string())
                        });
                        prop_assert!(named, "device {} selected but not named", i);
                    }
                    prop_assert!(sel.indices.len() <= items.len());
                }
                Err(RequestError::Unknown { item, .. } | RequestError::Gone { item, .. }) => {
                    prop_assert!(items.contains(&item));
                    let base = split_replica(&item).unwrap().0;
                    prop_assert!(!ids.iter().any(|id| id == base));
                }
                Err(RequestError::Duplicate { item, first }) => {
                    prop_assert!(items.contains(&item) && items.contains(&first));
                }
                Err(RequestError::Replica { item, replica, .. }) => {
                    prop_assert!(replica >= replicas && items.contains(&item));
                }
                Err(other) => prop_assert!(false, "unexpected {}", other),
            }
        }
    }
}
