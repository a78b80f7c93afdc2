//! Capability groups: parts of a driver a container chooses by a variable.
//!
//! A vendor's user space comes in parts a container may not all want: NVIDIA's compute libraries,
//! its video codecs, its OpenGL/Vulkan stack. A profile names the parts (`[capabilities]`), tags
//! each library, binary or file with the part it belongs to (`capability = "video"`), and names
//! the variable a container chooses by (NVIDIA: `NVIDIA_DRIVER_CAPABILITIES`). Untagged entries
//! come with every request.
//!
//! The value follows the convention NVIDIA's toolkit set, so images written for it work
//! unchanged: a comma list of names, `all` for every part; unset or empty means the profile's
//! `default`; a name the profile does not declare is refused (NVIDIA's hook refuses it too),
//! naming the variable and the names it knows.
//!
//! Where no container's environment is read (a CDI spec, a DRA claim's spec), every part is
//! injected: [`Capabilities::All`].

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::excerpt::Excerpt;
use crate::names::ProfileName;

/// The word that selects every part.
pub const ALL: &str = "all";

/// The longest part name.
pub const MAX_NAME: usize = 32;

/// A profile's `[capabilities]` table.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CapabilitySpec {
    /// The variable a container chooses by, e.g. `NVIDIA_DRIVER_CAPABILITIES`.
    pub env: String,
    /// The parts, e.g. `["compute", "utility", "video", "graphics", "display", "compat32",
    /// "ngx"]`: lower-case words (letters, digits, `_`, `-`), not `all`.
    pub names: Vec<String>,
    /// The parts a container gets when it leaves the variable unset or empty.
    #[serde(default)]
    pub default: Vec<String>,
}

impl CapabilitySpec {
    /// What is wrong with the table, as (key under `capabilities`, problem), if anything.
    pub(crate) fn problem(&self) -> Option<(String, String)> {
        if self.names.is_empty() {
            return Some((
                "names".into(),
                "is empty: name at least one part, e.g. [\"compute\"]".into(),
            ));
        }
        for (i, n) in self.names.iter().enumerate() {
            let word = !n.is_empty()
                && n.len() <= MAX_NAME
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
            if !word || n == ALL {
                return Some((format!("names[{i}]"), format!("{n:?} is not a part name: use 1 to {MAX_NAME} lower-case letters, digits, '_' or '-', and not {ALL:?} (which selects every part)")));
            }
            if self.names[..i].contains(n) {
                return Some((format!("names[{i}]"), format!("{n:?} is listed twice")));
            }
        }
        for (i, d) in self.default.iter().enumerate() {
            if !self.names.contains(d) {
                return Some((
                    format!("default[{i}]"),
                    format!("{d:?} is not one of `names`: declare it there or remove it"),
                ));
            }
        }
        None
    }

    /// True when `name` is one of the declared parts.
    pub fn declares(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// The parts one container gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capabilities {
    /// Every part (`all`, a profile with no groups, or a path that reads no container's env).
    All,
    /// These parts.
    Only(BTreeSet<String>),
}

/// Why a container's choice of parts was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("profile {profile}: {env}={value} names {unknown}, which the profile does not provide (it provides {known}, or {ALL:?}): fix the variable, or add the part to the profile's [capabilities]")]
pub struct CapabilityError {
    /// The profile whose parts were chosen.
    pub profile: ProfileName,
    /// The variable.
    pub env: String,
    /// The value, as a message shows it.
    pub value: String,
    /// The first name the profile does not declare, as a message shows it.
    pub unknown: String,
    /// The declared names, comma-separated.
    pub known: String,
}

impl Capabilities {
    /// The parts chosen by `value` (the container's variable; `None` when unset) under
    /// `profile`'s groups. A profile without groups gives [`Capabilities::All`].
    pub fn chosen(
        profile: &ProfileName,
        spec: Option<&CapabilitySpec>,
        value: Option<&str>,
    ) -> Result<Self, CapabilityError> {
        let Some(spec) = spec else {
            return Ok(Self::All);
        };
        let items: Vec<&str> = value
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if items.is_empty() {
            return Ok(Self::Only(spec.default.iter().cloned().collect()));
        }
        if items.contains(&ALL) {
            return Ok(Self::All);
        }
        let mut out = BTreeSet::new();
        for item in items {
            if !spec.declares(item) {
                return Err(CapabilityError {
                    profile: profile.clone(),
                    env: spec.env.clone(),
                    value: format!("{:?}", Excerpt(value.unwrap_or(""))),
                    unknown: format!("{:?}", Excerpt(item)),
                    known: spec.names.join(","),
                });
            }
            out.insert(item.to_owned());
        }
        Ok(Self::Only(out))
    }

    /// True when an entry tagged `part` comes with these parts (untagged entries always do).
    pub fn includes(&self, part: Option<&str>) -> bool {
        match (self, part) {
            (_, None) | (Self::All, Some(_)) => true,
            (Self::Only(set), Some(p)) => set.contains(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvidia() -> CapabilitySpec {
        CapabilitySpec {
            env: "NVIDIA_DRIVER_CAPABILITIES".into(),
            names: ["compute", "utility", "video", "graphics"]
                .map(String::from)
                .to_vec(),
            default: ["utility", "compute"].map(String::from).to_vec(),
        }
    }

    fn chosen(value: Option<&str>) -> Result<Capabilities, CapabilityError> {
        Capabilities::chosen(&ProfileName::new("nvidia").unwrap(), Some(&nvidia()), value)
    }

    fn only(names: &[&str]) -> Capabilities {
        Capabilities::Only(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn unset_or_empty_means_the_default() {
        assert_eq!(chosen(None).unwrap(), only(&["compute", "utility"]));
        assert_eq!(chosen(Some("")).unwrap(), only(&["compute", "utility"]));
        assert_eq!(chosen(Some(" , ")).unwrap(), only(&["compute", "utility"]));
    }

    #[test]
    fn a_list_chooses_its_parts_and_all_chooses_every_part() {
        assert_eq!(
            chosen(Some("video, compute")).unwrap(),
            only(&["compute", "video"])
        );
        assert_eq!(chosen(Some("compute,all")).unwrap(), Capabilities::All);
    }

    #[test]
    fn an_undeclared_part_is_refused_naming_the_variable_and_the_known_parts() {
        let e = chosen(Some("compute,ngx")).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("NVIDIA_DRIVER_CAPABILITIES=\"compute,ngx\""),
            "{m}"
        );
        assert!(m.contains("names \"ngx\""), "{m}");
        assert!(m.contains("compute,utility,video,graphics"), "{m}");
        let long = "x".repeat(100_000);
        assert!(chosen(Some(&long)).unwrap_err().to_string().len() < 1000);
    }

    #[test]
    fn untagged_entries_always_come_and_tagged_ones_with_their_part() {
        let c = only(&["compute"]);
        assert!(c.includes(None));
        assert!(c.includes(Some("compute")));
        assert!(!c.includes(Some("video")));
        assert!(Capabilities::All.includes(Some("video")));
    }

    #[test]
    fn a_profile_without_groups_gets_everything() {
        let p = ProfileName::new("demo").unwrap();
        assert_eq!(
            Capabilities::chosen(&p, None, Some("anything")).unwrap(),
            Capabilities::All
        );
    }

    #[test]
    fn the_table_is_checked() {
        let mut s = nvidia();
        assert_eq!(s.problem(), None);
        s.default.push("ngx".into());
        assert_eq!(s.problem().unwrap().0, "default[2]");
        s = nvidia();
        s.names.push("all".into());
        assert_eq!(s.problem().unwrap().0, "names[4]");
        s = nvidia();
        s.names.push("compute".into());
        assert!(s.problem().unwrap().1.contains("twice"));
        s.names.clear();
        assert_eq!(s.problem().unwrap().0, "names");
    }
}
