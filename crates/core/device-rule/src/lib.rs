//! One device rule, in one vocabulary, from the planner to the kernel and the specs: which
//! device ([`DeviceKind`], major, minor) may be used how ([`Access`]: read, write, mknod).
//!
//! The planner (`devinject-devices`) makes a [`DeviceRule`] for each node it grants; the cgroup
//! crate writes the same value to `devices.allow` or compiles it into the eBPF allow prefix;
//! the runtime shim renders it into `linux.resources.devices`, the CDI exporter into a device
//! node's `permissions`. Each reads the letters and type codes from here, so no layer formats
//! or parses them on its own, and handing the plan's rules to the cgroup crate cannot fail.
//!
//! The text form is the cgroup v1 `devices.allow` line, `c 1:3 rwm`, which is also how
//! rules appear in logs and errors. Wildcards (`*`, `a`) are deliberately not supported: a
//! hook grants exactly the nodes it was asked for and never a whole class of devices.
//!
//! With the `serde` feature the types serialize as the plan always has: the kind as `Char` /
//! `Block`, the access as its letters.
#![warn(missing_docs)]

use std::fmt;
use std::str::FromStr;

/// Largest major number the kernel encodes in a `dev_t` (12 bits).
pub const MAX_MAJOR: u32 = (1 << 12) - 1;
/// Largest minor number the kernel encodes in a `dev_t` (20 bits, `MINORBITS`).
pub const MAX_MINOR: u32 = (1 << 20) - 1;

/// Why a rule did not parse or cannot be expressed to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// A textual rule or access string did not parse.
    Parse {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A rule cannot be expressed to the kernel.
    Invalid {
        /// The rule, as text.
        rule: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Parse { input, reason } => write!(f, "invalid device rule {input:?}: {reason}"),
            Self::Invalid { rule, reason } => write!(f, "invalid device rule \"{rule}\": {reason}"),
        }
    }
}

impl std::error::Error for RuleError {}

impl RuleError {
    /// `input` did not parse, for `reason`.
    fn parse(input: &str, reason: &str) -> Self {
        Self::Parse {
            input: input.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

/// Character or block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum DeviceKind {
    /// Character device, `c`.
    Char,
    /// Block device, `b`.
    Block,
}

impl DeviceKind {
    /// The letter used by `devices.allow`, the OCI spec, CDI, `mknod` and `ls -l`.
    pub fn letter(self) -> char {
        match self {
            DeviceKind::Char => 'c',
            DeviceKind::Block => 'b',
        }
    }

    /// [`DeviceKind::letter`] as a string, for JSON fields (`"type": "c"`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Char => "c",
            DeviceKind::Block => "b",
        }
    }

    /// The kind named by `c` or `b`; `None` for anything else.
    pub fn from_letter(letter: &str) -> Option<Self> {
        match letter {
            "c" => Some(DeviceKind::Char),
            "b" => Some(DeviceKind::Block),
            _ => None,
        }
    }

    /// The type code in `bpf_cgroup_dev_ctx.access_type` (`BPF_DEVCG_DEV_BLOCK` = 1,
    /// `BPF_DEVCG_DEV_CHAR` = 2).
    pub fn bpf_type(self) -> u32 {
        match self {
            DeviceKind::Block => 1,
            DeviceKind::Char => 2,
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Access to a device: any combination of read, write and mknod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access {
    /// Open for reading, `r`.
    pub read: bool,
    /// Open for writing, `w`.
    pub write: bool,
    /// Create a node with mknod(2), `m`.
    pub mknod: bool,
}

impl Access {
    /// `rwm`: read, write and create the node with mknod(2).
    pub const RWM: Access = Access::new(true, true, true);
    /// `rw`: read and write the node, never create one.
    pub const RW: Access = Access::new(true, true, false);
    /// `r`: read the node only.
    pub const R: Access = Access::new(true, false, false);

    /// Builds an access set.
    pub const fn new(read: bool, write: bool, mknod: bool) -> Self {
        Self { read, write, mknod }
    }

    /// True when nothing is allowed.
    pub fn is_empty(self) -> bool {
        !(self.read || self.write || self.mknod)
    }

    /// True when every access in `other` is also in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.bpf_mask() & other.bpf_mask() == other.bpf_mask()
    }

    /// The access bits in `bpf_cgroup_dev_ctx.access_type >> 16` (`BPF_DEVCG_ACC_MKNOD` = 1,
    /// `BPF_DEVCG_ACC_READ` = 2, `BPF_DEVCG_ACC_WRITE` = 4).
    pub fn bpf_mask(self) -> u32 {
        u32::from(self.mknod) | u32::from(self.read) << 1 | u32::from(self.write) << 2
    }

    /// The inverse of [`Access::bpf_mask`]; unknown bits are ignored.
    pub fn from_bpf_mask(mask: u32) -> Self {
        Self::new(mask & 2 != 0, mask & 4 != 0, mask & 1 != 0)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (on, letter) in [(self.read, 'r'), (self.write, 'w'), (self.mknod, 'm')] {
            if on {
                write!(f, "{letter}")?;
            }
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Access {
    /// As its letters, `"rwm"`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl FromStr for Access {
    type Err = RuleError;

    /// Parses letters from `rwm` in any order, each at most once, at least one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| RuleError::parse(s, reason);
        if s.is_empty() {
            return Err(err("empty access, expected letters from \"rwm\""));
        }
        let mut access = Access::default();
        for c in s.chars() {
            let slot = match c {
                'r' => &mut access.read,
                'w' => &mut access.write,
                'm' => &mut access.mknod,
                _ => return Err(err("unknown access letter, expected letters from \"rwm\"")),
            };
            if *slot {
                return Err(err("access letter repeated"));
            }
            *slot = true;
        }
        Ok(access)
    }
}

/// Which device a node is: its kind and numbers, as the admission decided them. Every step that
/// makes a node in a container makes this one, and checks a host node it reads against it
/// rather than taking whatever a host path leads to then.
///
/// The text form is the one of `ls -l` and of a rule without its access, `c 10:232`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceNumber {
    /// Character or block.
    pub kind: DeviceKind,
    /// Major number, at most [`MAX_MAJOR`].
    pub major: u32,
    /// Minor number, at most [`MAX_MINOR`].
    pub minor: u32,
}

impl DeviceNumber {
    /// The device `kind major:minor`.
    pub const fn new(kind: DeviceKind, major: u32, minor: u32) -> Self {
        Self { kind, major, minor }
    }
}

impl fmt::Display for DeviceNumber {
    /// `c 10:232`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}:{}", self.kind, self.major, self.minor)
    }
}

impl FromStr for DeviceNumber {
    type Err = RuleError;

    /// Parses `c 10:232` / `b 8:0`, numbers within what a `dev_t` holds.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| RuleError::parse(s, reason);
        let mut fields = s.split_whitespace();
        let (Some(kind), Some(numbers), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(err("expected \"<c|b> <major>:<minor>\""));
        };
        parse_number(kind, numbers, &err)
    }
}

/// `kind` and `major:minor` of a node or a rule; `err` names the whole text parsed.
fn parse_number(
    kind: &str,
    numbers: &str,
    err: &dyn Fn(&str) -> RuleError,
) -> Result<DeviceNumber, RuleError> {
    let kind =
        DeviceKind::from_letter(kind).ok_or_else(|| err("device type must be \"c\" or \"b\""))?;
    let (major, minor) = numbers
        .split_once(':')
        .ok_or_else(|| err("expected <major>:<minor>"))?;
    let number = |n: &str| {
        n.parse::<u32>()
            .map_err(|_| err("major and minor must be decimal numbers (no wildcards)"))
    };
    let (major, minor) = (number(major)?, number(minor)?);
    if major > MAX_MAJOR {
        return Err(err("major number above 4095"));
    }
    if minor > MAX_MINOR {
        return Err(err("minor number above 1048575"));
    }
    Ok(DeviceNumber::new(kind, major, minor))
}

/// One device the container may use, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeviceRule {
    /// Character or block.
    pub kind: DeviceKind,
    /// Major number, at most [`MAX_MAJOR`].
    pub major: u32,
    /// Minor number, at most [`MAX_MINOR`].
    pub minor: u32,
    /// Allowed access; never empty.
    pub access: Access,
}

impl DeviceRule {
    /// Builds a rule (checked by [`DeviceRule::validate`] when used).
    pub const fn new(kind: DeviceKind, major: u32, minor: u32, access: Access) -> Self {
        Self {
            kind,
            major,
            minor,
            access,
        }
    }

    /// Checks the numbers fit a `dev_t` and that the rule grants something.
    pub fn validate(&self) -> Result<(), RuleError> {
        let reason = if self.major > MAX_MAJOR {
            "major number above 4095"
        } else if self.minor > MAX_MINOR {
            "minor number above 1048575"
        } else if self.access.is_empty() {
            "no access granted"
        } else {
            return Ok(());
        };
        Err(RuleError::Invalid {
            rule: format!(
                "{} {}:{} {}",
                self.kind, self.major, self.minor, self.access
            ),
            reason,
        })
    }

    /// The device this rule is about.
    pub fn number(&self) -> DeviceNumber {
        DeviceNumber::new(self.kind, self.major, self.minor)
    }

    /// True when this rule allows `access` to the device `kind major:minor`.
    pub fn allows(&self, kind: DeviceKind, major: u32, minor: u32, access: Access) -> bool {
        self.kind == kind
            && self.major == major
            && self.minor == minor
            && self.access.contains(access)
    }
}

impl fmt::Display for DeviceRule {
    /// The `devices.allow` line, e.g. `c 1:3 rwm`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}:{} {}",
            self.kind, self.major, self.minor, self.access
        )
    }
}

impl FromStr for DeviceRule {
    type Err = RuleError;

    /// Parses `c 1:3 rwm` / `b 8:0 r` (no wildcards).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| RuleError::parse(s, reason);
        let mut fields = s.split_whitespace();
        let (Some(kind), Some(numbers), Some(access), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(err("expected \"<c|b> <major>:<minor> <rwm>\""));
        };
        let n = parse_number(kind, numbers, &err)?;
        // Name the whole rule, not only its access part, when the letters are wrong.
        let access = access.parse().map_err(|e| match e {
            RuleError::Parse { reason, .. } => err(&format!("access {access:?}: {reason}")),
            other => other,
        })?;
        let rule = DeviceRule::new(n.kind, n.major, n.minor, access);
        rule.validate()?;
        Ok(rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_text_round_trips() {
        for text in ["c 1:3 rwm", "b 8:0 r", "c 10:200 rw", "c 4095:1048575 m"] {
            let rule: DeviceRule = text.parse().expect("valid rule");
            assert_eq!(rule.to_string(), text);
        }
    }

    #[test]
    fn kind_letters_round_trip_and_nothing_else_is_a_kind() {
        for kind in [DeviceKind::Char, DeviceKind::Block] {
            assert_eq!(kind.as_str(), kind.letter().to_string());
            assert_eq!(kind.to_string(), kind.as_str());
            assert_eq!(DeviceKind::from_letter(kind.as_str()), Some(kind));
        }
        for other in ["", "u", "p", "a", "C", "cb"] {
            assert_eq!(DeviceKind::from_letter(other), None, "{other:?}");
        }
    }

    #[test]
    fn access_letters_in_any_order_print_canonically() {
        let a: Access = "mwr".parse().expect("valid access");
        assert_eq!(a, Access::RWM);
        assert_eq!(a.to_string(), "rwm");
        assert_eq!("wr".parse::<Access>().expect("valid").to_string(), "rw");
    }

    #[test]
    fn bad_rules_are_rejected_with_the_input_named() {
        for bad in [
            "",
            "c 1:3",
            "x 1:3 rw",
            "c *:* rwm",
            "a",
            "c 1 rw",
            "c 1:3 rwx",
            "c 1:3 rr",
            "c 4096:0 r",
            "c 1:1048576 r",
            "c 1:3 rw extra",
            "c -1:3 rw",
        ] {
            let err = bad.parse::<DeviceRule>().expect_err(bad).to_string();
            assert!(
                err.contains(&format!("{bad:?}")) || err.contains("device rule"),
                "{err}"
            );
        }
    }

    #[test]
    fn device_numbers_round_trip_and_bad_ones_name_the_text() {
        for text in ["c 10:232", "b 8:0", "c 4095:1048575"] {
            let n: DeviceNumber = text.parse().expect("valid number");
            assert_eq!(n.to_string(), text);
        }
        let rule: DeviceRule = "c 10:232 rw".parse().expect("valid rule");
        assert_eq!(rule.number(), DeviceNumber::new(DeviceKind::Char, 10, 232));
        for bad in [
            "",
            "c",
            "c 10",
            "c 10:232 rw",
            "x 1:3",
            "c *:3",
            "c 4096:0",
            "c 1:1048576",
        ] {
            let err = bad.parse::<DeviceNumber>().expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn bad_access_letters_name_the_whole_rule() {
        // Found by the property tests: the error named only "rr", not the rule it came from.
        for bad in ["c 1:3 rr", "b 8:0 rwx"] {
            let err = bad.parse::<DeviceRule>().expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn validate_rejects_empty_access_and_oversized_numbers() {
        let empty = DeviceRule::new(DeviceKind::Char, 1, 3, Access::default());
        assert!(empty.validate().is_err());
        let big = DeviceRule::new(DeviceKind::Block, MAX_MAJOR + 1, 0, Access::R);
        assert!(big
            .validate()
            .expect_err("too big")
            .to_string()
            .contains("4095"));
        assert!(
            DeviceRule::new(DeviceKind::Char, MAX_MAJOR, MAX_MINOR, Access::R)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn bpf_encodings_match_linux_bpf_h() {
        assert_eq!(DeviceKind::Block.bpf_type(), 1);
        assert_eq!(DeviceKind::Char.bpf_type(), 2);
        assert_eq!(Access::new(false, false, true).bpf_mask(), 1);
        assert_eq!(Access::R.bpf_mask(), 2);
        assert_eq!(Access::new(false, true, false).bpf_mask(), 4);
        assert_eq!(Access::RWM.bpf_mask(), 7);
        for mask in 0..8 {
            assert_eq!(Access::from_bpf_mask(mask).bpf_mask(), mask);
        }
    }

    #[test]
    fn allows_is_a_subset_test() {
        let rule: DeviceRule = "c 1:9 rw".parse().expect("valid");
        assert!(rule.allows(DeviceKind::Char, 1, 9, Access::R));
        assert!(rule.allows(DeviceKind::Char, 1, 9, Access::RW));
        assert!(!rule.allows(DeviceKind::Char, 1, 9, Access::RWM));
        assert!(!rule.allows(DeviceKind::Block, 1, 9, Access::R));
        assert!(!rule.allows(DeviceKind::Char, 1, 8, Access::R));
    }
}
