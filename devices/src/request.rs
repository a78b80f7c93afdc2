//! What a container asked for: the value of `<NAME>_VISIBLE_DEVICES` or our annotation.
//!
//! Grammar (whitespace around items is ignored):
//! - unset, empty or `void`: nothing of this kind, not even its libraries;
//! - `none`: no device, but the kind's libraries, binaries, files and env;
//! - `all`: every discovered device;
//! - a comma list of device ids or indices, e.g. `0,2` or `GPU-4a1c,GPU-77e0`. An id may carry a
//!   replica suffix `::N` (how the device plugin advertises shared devices); it maps back to the
//!   physical device.
//!
//! Unknown ids, duplicates, empty items and oversize input are errors naming the offending value:
//! a bad request never injects anything.

use crate::discovery::Device;

/// The longest request value accepted.
pub const MAX_REQUEST_BYTES: usize = 4096;
/// The most items a request may list.
pub const MAX_REQUEST_ITEMS: usize = 256;

/// Why a request was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
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
    #[error("request {value:?} has an empty item: separate ids with single commas")]
    EmptyItem {
        /// The whole value.
        value: String,
    },
    /// An item has characters no id can have.
    #[error("request item {item:?} is malformed: ids use A-Z a-z 0-9 . _ - : and an optional ::N replica suffix")]
    Malformed {
        /// The item.
        item: String,
    },
    /// `all`, `none` or `void` mixed into a list.
    #[error("request item {item:?} cannot be combined with other items: use it alone")]
    KeywordInList {
        /// The keyword.
        item: String,
    },
    /// An item names no discovered device.
    #[error("unknown device {item:?}: known ids are {known}")]
    Unknown {
        /// The item.
        item: String,
        /// The discovered ids, comma-separated.
        known: String,
    },
    /// Two items name the same device.
    #[error("device {item:?} is requested twice (as {first:?} and {item:?})")]
    Duplicate {
        /// The second item.
        item: String,
        /// The first item naming the same device.
        first: String,
    },
    /// A replica suffix out of range.
    #[error("request item {item:?}: replica {replica} is out of range (the profile shares each device {replicas} times)")]
    Replica {
        /// The item.
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

    /// Resolves the request against discovered devices. An item matches a device id first, then
    /// (all digits) a device index; `id::N` names replica N of device `id`.
    pub fn select(&self, devices: &[Device], replicas: u32) -> Result<Selection, RequestError> {
        let items = match self {
            Self::Void | Self::None => return Ok(Selection::default()),
            Self::All => {
                return Ok(Selection {
                    indices: (0..devices.len()).collect(),
                })
            }
            Self::List(items) => items,
        };
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
            let found = devices
                .iter()
                .position(|d| d.id.as_str() == base)
                .or_else(|| {
                    let idx: usize = base
                        .parse()
                        .ok()
                        .filter(|_| base.bytes().all(|b| b.is_ascii_digit()))?;
                    (idx < devices.len()).then_some(idx)
                });
            let Some(idx) = found else {
                return Err(RequestError::Unknown {
                    item: item.clone(),
                    known: known_ids(devices),
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

fn known_ids(devices: &[Device]) -> String {
    if devices.is_empty() {
        return "(none discovered)".into();
    }
    let ids: Vec<&str> = devices.iter().take(16).map(|d| d.id.as_str()).collect();
    let more = if devices.len() > 16 { ", ..." } else { "" };
    format!("{}{more}", ids.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::DeviceId;

    fn devs(ids: &[&str]) -> Vec<Device> {
        ids.iter()
            .enumerate()
            .map(|(index, id)| Device {
                id: DeviceId::new(id).unwrap(),
                index,
                name: format!("accel{index}"),
                nodes: vec![],
                numa_node: None,
                healthy: true,
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
    fn lists_by_id_and_index() {
        let d = devs(&["GPU-a", "GPU-b", "GPU-c"]);
        let r = Request::parse(Some("GPU-c, 0")).unwrap();
        assert_eq!(r.select(&d, 1).unwrap().indices, [2, 0]);
        let all = Request::All.select(&d, 1).unwrap();
        assert_eq!(all.indices, [0, 1, 2]);
        assert!(Request::None.select(&d, 1).unwrap().indices.is_empty());
    }

    #[test]
    fn ids_win_over_indices() {
        // Device "1" is at index 0: "1" means that device, not index 1.
        let d = devs(&["1", "0"]);
        let r = Request::parse(Some("1")).unwrap();
        assert_eq!(r.select(&d, 1).unwrap().indices, [0]);
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

    #[test]
    fn unknown_and_duplicate_ids_are_errors() {
        let d = devs(&["0", "1"]);
        let err = Request::parse(Some("0,7"))
            .unwrap()
            .select(&d, 1)
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
            .select(&d, 1)
            .unwrap_err();
        assert!(matches!(err, RequestError::Duplicate { .. }));
    }

    #[test]
    fn replicas_map_back_to_the_physical_device() {
        let d = devs(&["0", "1"]);
        let r = Request::parse(Some("1::0,1::3,0::2")).unwrap();
        assert_eq!(r.select(&d, 4).unwrap().indices, [1, 0]);
        let err = Request::parse(Some("1::4"))
            .unwrap()
            .select(&d, 4)
            .unwrap_err();
        assert!(matches!(err, RequestError::Replica { replica: 4, .. }));
        // A plain id and a replica of the same device is still a duplicate.
        let err = Request::parse(Some("1,1::0"))
            .unwrap()
            .select(&d, 4)
            .unwrap_err();
        assert!(matches!(err, RequestError::Duplicate { .. }));
        assert_eq!(replica_id("GPU-a", 3), "GPU-a::3");
    }
}
