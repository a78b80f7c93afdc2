//! A profile's partitions (`[partitions]`): the shapes one device can be used in besides whole.
//!
//! A device is split into `units` equal units (an accelerator's memory slices or engines). A
//! shape of `size` units cuts it into `units / size` partitions, partition `n` covering units
//! `n * size` to `(n + 1) * size - 1`. The DRA driver publishes the whole device and every
//! partition of every shape, each consuming the units it covers from a counter set of the
//! device (`resource.k8s.io/v1` partitionable devices, on by default from Kubernetes 1.36), so
//! the scheduler never allocates two that overlap. A container given a partition gets the
//! device's nodes and the variable `env` set to the units it covers (`first-last`), which the
//! vendor's library reads to confine itself. The device plugin does not read this table.
//!
//! ```toml
//! [partitions]
//! units = 4
//! env = "DEMO_PARTITION"
//! [partitions.shapes]
//! half = 2
//! quarter = 1
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

/// The most units a device may be split into: the API's limit on the counters of one counter
/// set and of one device's consumption (32 each).
pub const MAX_UNITS: u32 = 32;
/// The most devices one device may be published as, itself and its partitions: the API's
/// limit on the devices with counters in one slice (64).
pub const MAX_PUBLISHED_PER_DEVICE: u32 = 64;
/// The longest shape name.
pub const MAX_SHAPE_NAME: usize = 16;
/// What separates a device id from the partition in a partition's id: `<id>@<shape><n>`.
pub const PARTITION_SEPARATOR: char = '@';

/// The `[partitions]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPartitions {
    units: i64,
    env: String,
    shapes: BTreeMap<String, i64>,
}

/// One way to cut a device: `units / size` partitions of `size` units each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Its name (lower-case letters), e.g. `half`.
    pub name: String,
    /// How many units each partition covers.
    pub size: u32,
}

/// One partition of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// The shape's name.
    pub shape: String,
    /// Which partition of the shape (0 first).
    pub index: u32,
    /// The first unit it covers.
    pub first: u32,
    /// How many units it covers.
    pub size: u32,
}

impl Partition {
    /// The id partition `self` of device `device` is published under: `<device>@<shape><n>`.
    pub fn id(&self, device: &str) -> String {
        format!("{device}{PARTITION_SEPARATOR}{}{}", self.shape, self.index)
    }

    /// The units it covers.
    pub fn units(&self) -> std::ops::Range<u32> {
        self.first..self.first + self.size
    }

    /// What the container's variable is set to: `first-last`.
    pub fn env_value(&self) -> String {
        format!("{}-{}", self.first, self.first + self.size - 1)
    }
}

/// A profile's validated `[partitions]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitions {
    /// How many units a device is split into (2 to [`MAX_UNITS`]).
    pub units: u32,
    /// The variable a container given a partition gets (the profile checks its name, as
    /// it does `[env]`'s).
    pub env: String,
    /// The shapes, largest first.
    pub shapes: Vec<Shape>,
}

impl Partitions {
    /// Reads the table: `units` 2 to [`MAX_UNITS`] and 1 or more
    /// shapes, each a name of lower-case letters other than `whole` and a size that divides
    /// `units` and is less than it, no two of one size; in all at most
    /// [`MAX_PUBLISHED_PER_DEVICE`] devices per device. The error is the dotted key and the
    /// problem with it.
    pub(crate) fn from_raw(raw: &RawPartitions) -> Result<Self, (String, String)> {
        let units = match u32::try_from(raw.units) {
            Ok(u) if (2..=MAX_UNITS).contains(&u) => u,
            _ => {
                return Err((
                    "partitions.units".into(),
                    format!(
                        "is {}: use 2 to {MAX_UNITS} (the counters one device may have)",
                        raw.units
                    ),
                ))
            }
        };
        if raw.shapes.is_empty() {
            return Err((
                "partitions.shapes".into(),
                "names no shape: add one, e.g. `half = 2`".into(),
            ));
        }
        let mut shapes: Vec<Shape> = Vec::with_capacity(raw.shapes.len());
        let mut published = 1u32;
        for (name, &size) in &raw.shapes {
            let key = format!("partitions.shapes.{name}");
            let named = !name.is_empty()
                && name.len() <= MAX_SHAPE_NAME
                && name.bytes().all(|b| b.is_ascii_lowercase());
            if !named || name == "whole" {
                return Err((
                    key,
                    format!("is not a shape name: use 1 to {MAX_SHAPE_NAME} lower-case letters, not `whole` (the device itself)"),
                ));
            }
            let size = match u32::try_from(size) {
                Ok(s) if s >= 1 && s < units && units % s == 0 => s,
                _ => {
                    return Err((
                        key,
                        format!(
                            "is {size}: use a size less than `units` ({units}) that divides it"
                        ),
                    ))
                }
            };
            if let Some(other) = shapes.iter().find(|s| s.size == size) {
                return Err((
                    key,
                    format!(
                        "has the size of shape `{}` ({size}): give each size one name",
                        other.name
                    ),
                ));
            }
            published += units / size;
            shapes.push(Shape {
                name: name.clone(),
                size,
            });
        }
        if published > MAX_PUBLISHED_PER_DEVICE {
            return Err((
                "partitions.shapes".into(),
                format!("make each device {published} devices (itself and its partitions), more than the {MAX_PUBLISHED_PER_DEVICE} a ResourceSlice with counters holds: drop the smallest shape"),
            ));
        }
        shapes.sort_by_key(|s| std::cmp::Reverse(s.size));
        Ok(Self {
            units,
            env: raw.env.clone(),
            shapes,
        })
    }

    /// Every partition of one device, shape by shape (largest first), in unit order.
    pub fn all(&self) -> Vec<Partition> {
        self.shapes
            .iter()
            .flat_map(|shape| {
                (0..self.units / shape.size).map(move |index| Partition {
                    shape: shape.name.clone(),
                    index,
                    first: index * shape.size,
                    size: shape.size,
                })
            })
            .collect()
    }

    /// How many devices one device is published as: itself and its partitions.
    pub fn published_per_device(&self) -> usize {
        1 + self.all().len()
    }

    /// The ids device `device` is published under: its own, then each partition's
    /// ([`Partition::id`]), [`Self::published_per_device`] in all.
    pub fn published_ids(&self, device: &str) -> Vec<String> {
        std::iter::once(device.to_owned())
            .chain(self.all().iter().map(|p| p.id(device)))
            .collect()
    }

    /// Splits a published id into the device's id and, for a partition's id
    /// (`<id>@<shape><n>`, see [`Partition::id`]), the partition; any other id is a whole
    /// device's.
    pub fn split<'a>(&self, published: &'a str) -> (&'a str, Option<Partition>) {
        let whole = (published, None);
        let Some((device, part)) = published.rsplit_once(PARTITION_SEPARATOR) else {
            return whole;
        };
        let digits = part.trim_start_matches(|c: char| c.is_ascii_lowercase());
        let shape = &part[..part.len() - digits.len()];
        let index = digits.parse::<u32>().ok();
        match (
            self.all().into_iter().find(|p| {
                p.shape == shape && Some(p.index) == index && digits == p.index.to_string()
            }),
            device.is_empty(),
        ) {
            (Some(p), false) => (device, Some(p)),
            _ => whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(units: i64, shapes: &[(&str, i64)]) -> RawPartitions {
        RawPartitions {
            units,
            env: "DEMO_PARTITION".into(),
            shapes: shapes.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn halves_and_quarters_cover_the_units_without_gaps() {
        let p = Partitions::from_raw(&raw(4, &[("quarter", 1), ("half", 2)])).unwrap();
        assert_eq!(p.shapes[0].name, "half", "largest first");
        let all = p.all();
        let seen: Vec<_> = all
            .iter()
            .map(|p| (p.id("0"), p.units(), p.env_value()))
            .collect();
        assert_eq!(
            seen,
            [
                ("0@half0".to_owned(), 0..2, "0-1".to_owned()),
                ("0@half1".to_owned(), 2..4, "2-3".to_owned()),
                ("0@quarter0".to_owned(), 0..1, "0-0".to_owned()),
                ("0@quarter1".to_owned(), 1..2, "1-1".to_owned()),
                ("0@quarter2".to_owned(), 2..3, "2-2".to_owned()),
                ("0@quarter3".to_owned(), 3..4, "3-3".to_owned()),
            ]
        );
        assert_eq!(p.published_per_device(), 7);
        let ids = p.published_ids("0");
        assert_eq!(ids.len(), p.published_per_device());
        assert_eq!(ids[..2], ["0", "0@half0"]);
        assert!(
            ids.iter().skip(1).all(|id| p.split(id).1.is_some()),
            "{ids:?}"
        );
    }

    #[test]
    fn a_partition_id_splits_back_and_other_ids_are_whole_devices() {
        let p = Partitions::from_raw(&raw(4, &[("quarter", 1), ("half", 2)])).unwrap();
        let (id, part) = p.split("GPU-0@quarter3");
        assert_eq!(id, "GPU-0");
        assert_eq!(part.unwrap().units(), 3..4);
        for whole in [
            "0",
            "a@b",
            "0@half2",
            "0@half01",
            "@half0",
            "0@eighth0",
            "0@half",
        ] {
            assert_eq!(p.split(whole), (whole, None), "{whole}");
        }
    }

    #[test]
    fn bad_tables_name_the_key_and_the_fix() {
        for (table, key, words) in [
            (raw(1, &[("half", 1)]), "partitions.units", "use 2 to 32"),
            (raw(33, &[("half", 1)]), "partitions.units", "use 2 to 32"),
            (raw(4, &[]), "partitions.shapes", "names no shape"),
            (
                raw(4, &[("whole", 2)]),
                "partitions.shapes.whole",
                "not `whole`",
            ),
            (
                raw(4, &[("Half", 2)]),
                "partitions.shapes.Half",
                "lower-case",
            ),
            (raw(4, &[("h2", 2)]), "partitions.shapes.h2", "lower-case"),
            (
                raw(4, &[("third", 3)]),
                "partitions.shapes.third",
                "divides",
            ),
            (raw(4, &[("all", 4)]), "partitions.shapes.all", "less than"),
            (raw(4, &[("none", 0)]), "partitions.shapes.none", "is 0"),
            (
                raw(4, &[("half", 2), ("pair", 2)]),
                "partitions.shapes.pair",
                "size of shape `half`",
            ),
        ] {
            let (k, problem) = Partitions::from_raw(&table).unwrap_err();
            assert_eq!(k, key, "{problem}");
            assert!(problem.contains(words), "{key}: {problem}");
        }
        let most = raw(32, &[("a", 1), ("b", 2), ("c", 4), ("d", 8), ("e", 16)]);
        assert_eq!(
            Partitions::from_raw(&most).unwrap().published_per_device(),
            63
        );
        let too_many = raw(
            30,
            &[
                ("a", 1),
                ("b", 2),
                ("c", 3),
                ("d", 5),
                ("e", 6),
                ("f", 10),
                ("g", 15),
            ],
        );
        let (k, problem) = Partitions::from_raw(&too_many).unwrap_err();
        assert_eq!(k, "partitions.shapes");
        assert!(
            problem.contains("72 devices") && problem.contains("drop the smallest shape"),
            "{problem}"
        );
    }
}
