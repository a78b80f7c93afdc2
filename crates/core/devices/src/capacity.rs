//! A profile's consumable capacity (`[capacity]`): how many DRA claims may share one device,
//! and in what amounts.
//!
//! A device such as `/dev/kvm` or `/dev/net/tun` is used by any number of containers at once.
//! The DRA driver publishes such a device once, with `allowMultipleAllocations` and the one
//! capacity the profile names (`resource.k8s.io/v1` consumable capacity, on by default from
//! Kubernetes 1.36): the scheduler allocates the device to as many claims as the capacity
//! holds, each consuming the profile's default unless its request asks for more
//! (`capacity.requests`), rounded up to the profile's step, and gives each allocation its own
//! share id. The device plugin does not read it: it shares by `replicas`.
//!
//! Two forms: `pods = 110` (whole units: each claim takes 1 unless it asks for more), or a
//! table with a fractional step, e.g. `[capacity.share]` with `value = 1` and `step = 0.25`
//! (a claim takes a quarter unless it asks for more, in quarters). Amounts have at most three
//! decimals: Kubernetes 1.37 computes fractional ranges in thousandths
//! (`DRAFractionalCapacityRange`, KEP-5075); before that the scheduler rounds every amount
//! of a range up to a whole unit.

use std::collections::BTreeMap;
use std::fmt;

/// The largest capacity a profile may state, in units.
pub const MAX_CAPACITY: u64 = 1_000_000;

/// An amount of a capacity in thousandths of a unit (`250` is 0.25).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(pub u64);

impl Amount {
    /// One whole unit.
    pub const ONE: Amount = Amount(1000);

    /// Reads a TOML number of at most three decimals, above 0 and at most [`MAX_CAPACITY`].
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        let thousandths = match value {
            toml::Value::Integer(i) => i.checked_mul(1000).map(|t| t as f64),
            toml::Value::Float(f) if f.is_finite() => Some(f * 1000.0),
            other => return Err(format!("is {other}: give a number, e.g. 4 or 0.25")),
        };
        let Some(t) = thousandths else {
            return Err(format!("is {value}: use at most {MAX_CAPACITY}"));
        };
        if (t - t.round()).abs() > 1e-6 {
            return Err(format!(
                "is {value}: use at most three decimals (Kubernetes counts thousandths)"
            ));
        }
        let t = t.round();
        if t < 1.0 || t > (MAX_CAPACITY * 1000) as f64 {
            return Err(format!(
                "is {value}: use above 0 and at most {MAX_CAPACITY}"
            ));
        }
        // In range and whole: the cast is exact.
        Ok(Self(t as u64))
    }
}

/// The amount as the API server writes a quantity back (its canonical form, so that the slice
/// it returns compares equal to the one applied): whole units with their trailing thousands as
/// a suffix (`4`, `2k`, `1M`), or thousandths where there is a fraction (`250m`, `1500m`).
impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.is_multiple_of(1000) {
            return write!(f, "{}m", self.0);
        }
        let mut units = self.0 / 1000;
        let mut suffixes = ["", "k", "M", "G"].iter();
        while units != 0 && units.is_multiple_of(1000) && suffixes.len() > 1 {
            units /= 1000;
            suffixes.next();
        }
        write!(f, "{units}{}", suffixes.next().unwrap_or(&""))
    }
}

/// A profile's `[capacity]`: one name, how much each device offers, and how a claim takes
/// from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// The capacity's name in the slice (a C identifier, e.g. `pods`).
    pub name: String,
    /// How much each device offers.
    pub value: Amount,
    /// The least a claim takes, and the increments of what it may ask for (1 for `name = N`).
    pub step: Amount,
    /// What a claim takes that asks for no amount (a multiple of `step`; `step` unless set).
    pub default: Amount,
}

impl Capacity {
    /// Reads the `[capacity]` table: exactly one entry, its name a C identifier of at most
    /// [`crate::attribute_name::MAX_ATTRIBUTE_NAME`] characters and not one of the attributes every
    /// device carries; its value a whole number (`pods = 110`) or a table of `value`, `step` and
    /// `default`. At least two steps must fit in the value (Kubernetes refuses a range whose
    /// least amount and one step exceed the capacity: a device one claim fills is not shared).
    /// The error is the problem with the key it names (`capacity` or `capacity.<name>[.<key>]`).
    pub(crate) fn from_table(
        table: &BTreeMap<String, toml::Value>,
    ) -> Result<Self, (String, String)> {
        let mut entries = table.iter();
        let (Some((name, entry)), None) = (entries.next(), entries.next()) else {
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
        let at = |field: &str| format!("{key}.{field}");
        let (value, step, default) = match entry {
            toml::Value::Integer(_) => {
                let value = Amount::from_toml(entry)
                    .map_err(|_| (key.clone(), format!("is {entry}: use 2 to {MAX_CAPACITY}")))?;
                (value, Amount::ONE, Amount::ONE)
            }
            toml::Value::Table(fields) => {
                if let Some(unknown) = fields
                    .keys()
                    .find(|k| !["value", "step", "default"].contains(&k.as_str()))
                {
                    return Err((
                        at(unknown),
                        "is not a capacity's key: use `value`, `step` and `default`".into(),
                    ));
                }
                let amount = |field: &str| -> Result<Option<Amount>, (String, String)> {
                    fields
                        .get(field)
                        .map(|v| Amount::from_toml(v).map_err(|problem| (at(field), problem)))
                        .transpose()
                };
                let missing = |field: &str| {
                    (
                        at(field),
                        format!("is missing: e.g. `[{key}]` with `value = 1` and `step = 0.25`"),
                    )
                };
                let value = amount("value")?.ok_or_else(|| missing("value"))?;
                let step = amount("step")?.ok_or_else(|| missing("step"))?;
                let default = amount("default")?.unwrap_or(step);
                if !default.0.is_multiple_of(step.0) || default > value {
                    return Err((
                        at("default"),
                        format!("is {default}: use a multiple of the step ({step}) of at most the value ({value})"),
                    ));
                }
                (value, step, default)
            }
            other => {
                return Err((
                    key,
                    format!(
                        "is {other}: give a whole number (`{name} = 110`) or a table of `value`, `step` and `default`"
                    ),
                ))
            }
        };
        if step.0 * 2 > value.0 {
            let (key, fix) = if entry.is_integer() {
                (key, format!("use 2 to {MAX_CAPACITY}"))
            } else {
                (
                    at("step"),
                    format!("use a step of at most half the value ({value})"),
                )
            };
            return Err((
                key,
                format!("leaves room for one claim only (value {value}, step {step}): {fix}, or remove `[capacity]` for a device one claim holds"),
            ));
        }
        Ok(Self {
            name: name.clone(),
            value,
            step,
            default,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_whole_number_is_read_as_units_a_claim_takes_one_of() {
        assert_eq!(
            Capacity::from_table(&table("pods = 110")),
            Ok(Capacity {
                name: "pods".into(),
                value: Amount(110_000),
                step: Amount::ONE,
                default: Amount::ONE,
            })
        );
    }

    #[test]
    fn a_table_states_a_fractional_step_and_default() {
        let read = Capacity::from_table(&table("[share]\nvalue = 1\nstep = 0.25\n")).unwrap();
        assert_eq!(
            (read.value, read.step, read.default),
            (Amount(1000), Amount(250), Amount(250))
        );
        let read =
            Capacity::from_table(&table("[share]\nvalue = 2.5\nstep = 0.1\ndefault = 0.5\n"))
                .unwrap();
        assert_eq!(
            (read.value, read.step, read.default),
            (Amount(2500), Amount(100), Amount(500))
        );
        let read = Capacity::from_table(&table("[gib]\nvalue = 80\nstep = 10\n")).unwrap();
        assert_eq!((read.value, read.step), (Amount(80_000), Amount(10_000)));
    }

    #[test]
    fn amounts_are_written_as_the_api_server_keeps_them() {
        for (amount, text) in [
            (Amount(1000), "1"),
            (Amount(110_000), "110"),
            (Amount(250), "250m"),
            (Amount(2500), "2500m"),
            (Amount(1), "1m"),
            (Amount(2_000_000), "2k"),
            (Amount(2_500_000), "2500"),
            (Amount(1_000_000_000), "1M"),
            (Amount(1_000_500), "1000500m"),
        ] {
            assert_eq!(amount.to_string(), text);
        }
    }

    #[test]
    fn none_two_or_a_bad_entry_names_the_key_and_the_fix() {
        for (text, key, words) in [
            ("", "capacity", "names 0 capacities"),
            ("a = 1\nb = 2", "capacity", "name exactly one"),
            ("pods = 0", "capacity.pods", "is 0: use 2 to 1000000"),
            ("pods = -3", "capacity.pods", "is -3"),
            ("pods = 1000001", "capacity.pods", "use 2 to"),
            ("pods = 1", "capacity.pods", "room for one claim only"),
            ("pods = 2.5", "capacity.pods", "a whole number"),
            ("pods = \"4\"", "capacity.pods", "a whole number"),
            ("\"1pods\" = 4", "capacity.1pods", "C identifier"),
            ("id = 4", "capacity.id", "every device carries"),
            ("[s]\nstep = 1", "capacity.s.value", "is missing"),
            ("[s]\nvalue = 1", "capacity.s.step", "is missing"),
            (
                "[s]\nvalue = 1\nstep = 0.0001",
                "capacity.s.step",
                "three decimals",
            ),
            ("[s]\nvalue = 1\nstep = 0", "capacity.s.step", "above 0"),
            ("[s]\nvalue = 1\nstep = -1", "capacity.s.step", "above 0"),
            (
                "[s]\nvalue = 1\nstep = 0.75",
                "capacity.s.step",
                "half the value",
            ),
            (
                "[s]\nvalue = 1e7\nstep = 1",
                "capacity.s.value",
                "at most 1000000",
            ),
            (
                "[s]\nvalue = 1\nstep = 0.25\ndefault = 0.3",
                "capacity.s.default",
                "multiple of the step (250m)",
            ),
            (
                "[s]\nvalue = 1\nstep = 0.25\ndefault = 1.25",
                "capacity.s.default",
                "at most the value (1)",
            ),
            (
                "[s]\nvalue = 1\nstep = 0.25\nmax = 1",
                "capacity.s.max",
                "use `value`, `step` and `default`",
            ),
            (
                "[s]\nvalue = \"1\"\nstep = 0.25",
                "capacity.s.value",
                "give a number",
            ),
        ] {
            let (k, problem) = Capacity::from_table(&table(text)).unwrap_err();
            assert_eq!(k, key, "{text}");
            assert!(problem.contains(words), "{text}: {problem}");
        }
    }
}
