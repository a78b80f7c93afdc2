//! A profile's consumable capacity (`[capacity]`): how many DRA claims may share one device.
//!
//! A device such as `/dev/kvm` or `/dev/net/tun` is used by any number of containers at once.
//! The DRA driver publishes such a device once, with `allowMultipleAllocations` and the one
//! capacity the profile names (`resource.k8s.io/v1` consumable capacity, on by default from
//! Kubernetes 1.36): the scheduler allocates the device to as many claims as the capacity
//! holds, each consuming 1 unless its request asks for more (`capacity.requests`), and gives
//! each allocation its own share id. The device plugin does not read it: it shares by
//! `replicas`.

use std::collections::BTreeMap;

/// The largest capacity a profile may state.
pub const MAX_CAPACITY: u64 = 1_000_000;

/// A profile's `[capacity]`: one name and amount, e.g. `pods = 110`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// The capacity's name in the slice (a C identifier, e.g. `pods`).
    pub name: String,
    /// How much each device offers; a claim consumes 1 unless it asks for more.
    pub value: u64,
}

impl Capacity {
    /// Reads the `[capacity]` table: exactly one entry, its name a C identifier of at most
    /// [`crate::attribute_name::MAX_ATTRIBUTE_NAME`] characters and not one of the attributes every
    /// device carries, its value 1 to [`MAX_CAPACITY`]. The error is the problem with the key
    /// it names (`capacity` or `capacity.<name>`).
    pub(crate) fn from_table(table: &BTreeMap<String, i64>) -> Result<Self, (String, String)> {
        let mut entries = table.iter();
        let (Some((name, &value)), None) = (entries.next(), entries.next()) else {
            return Err((
                "capacity".to_owned(),
                format!(
                    "names {} capacities: name exactly one, e.g. `pods = 110`",
                    table.len()
                ),
            ));
        };
        let key = format!("capacity.{name}");
        if let Some(problem) = crate::attribute_name::attribute_name_problem(name) {
            return Err((key, problem));
        }
        match u64::try_from(value) {
            Ok(v) if (1..=MAX_CAPACITY).contains(&v) => Ok(Self {
                name: name.clone(),
                value: v,
            }),
            _ => Err((key, format!("is {value}: use 1 to {MAX_CAPACITY}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, i64)]) -> BTreeMap<String, i64> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn one_named_amount_is_read() {
        assert_eq!(
            Capacity::from_table(&table(&[("pods", 110)])),
            Ok(Capacity {
                name: "pods".into(),
                value: 110
            })
        );
    }

    #[test]
    fn none_two_or_a_bad_entry_names_the_key_and_the_fix() {
        for (entries, key, words) in [
            (table(&[]), "capacity", "names 0 capacities"),
            (table(&[("a", 1), ("b", 2)]), "capacity", "name exactly one"),
            (
                table(&[("pods", 0)]),
                "capacity.pods",
                "is 0: use 1 to 1000000",
            ),
            (table(&[("pods", -3)]), "capacity.pods", "is -3"),
            (table(&[("pods", 1_000_001)]), "capacity.pods", "use 1 to"),
            (table(&[("1pods", 4)]), "capacity.1pods", "C identifier"),
            (table(&[("id", 4)]), "capacity.id", "every device carries"),
        ] {
            let (k, problem) = Capacity::from_table(&entries).unwrap_err();
            assert_eq!(k, key, "{entries:?}");
            assert!(problem.contains(words), "{entries:?}: {problem}");
        }
    }
}
