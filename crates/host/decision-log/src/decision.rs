//! One entry of the log: a container start that was refused, and its line.
//!
//! A line is one JSON object and a newline, at most [`MAX_LINE_BYTES`]: the container id, the
//! profile names and the message are cut to their own bounds ([`MAX_CONTAINER_BYTES`],
//! [`MAX_PROFILES`] of [`MAX_PROFILE_BYTES`] each, [`MAX_MESSAGE_BYTES`] of the message's
//! first line) and the message is cut further when its escaped form would still overflow the
//! line. Reading skips a line that is not such an object (a malformed line is counted by the
//! reader, never an error).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::pod::Pod;
use crate::reason::Reason;

/// The longest line written, newline included.
pub const MAX_LINE_BYTES: usize = 4096;
/// The longest container id kept (runc's and containerd's ids are 64 characters).
pub const MAX_CONTAINER_BYTES: usize = 128;
/// The most profile names kept.
pub const MAX_PROFILES: usize = 16;
/// The longest profile name kept.
pub const MAX_PROFILE_BYTES: usize = 64;
/// The longest message kept, before escaping.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// Which engine path refused the start. A line naming a path this release does not know is
/// not read (it counts as malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnginePath {
    /// `devinject-hook`, as a runtime's hook (its own run or the `finish` step).
    Hook,
    /// `devinject-runtime`, the runtime shim, on `create` or `run`.
    Shim,
    /// `devinject-nri`, on containerd's or CRI-O's `CreateContainer`.
    Nri,
}

impl EnginePath {
    /// The word, as written in the log and as a metric's label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            EnginePath::Hook => "hook",
            EnginePath::Shim => "shim",
            EnginePath::Nri => "nri",
        }
    }
}

impl fmt::Display for EnginePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused container start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// When, in milliseconds since the Unix epoch.
    pub time_unix_ms: u64,
    /// Which engine path refused it.
    pub path: EnginePath,
    /// The container's id (the NRI plugin: its id as containerd gives it), cut to
    /// [`MAX_CONTAINER_BYTES`]; empty when the start failed before it was known.
    pub container: String,
    /// The profiles the container asked for, as far as they were known.
    #[serde(default)]
    pub profiles: Vec<String>,
    /// Why.
    pub reason: Reason,
    /// The first line of the error the user saw, cut to [`MAX_MESSAGE_BYTES`].
    pub message: String,
    /// The pod the container belongs to, where its runtime named it ([`Pod`]); a line whose
    /// pod does not have the shape [`Pod::new`] keeps is read without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Pod>,
}

impl Decision {
    /// A decision made now.
    pub fn now(
        path: EnginePath,
        container: impl Into<String>,
        profiles: Vec<String>,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        let time_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Decision {
            time_unix_ms,
            path,
            container: container.into(),
            profiles,
            reason,
            message: message.into(),
            pod: None,
        }
    }

    /// This decision, about a container of `pod`.
    #[must_use]
    pub fn of_pod(mut self, pod: Option<Pod>) -> Self {
        self.pod = pod;
        self
    }

    /// When, as an RFC 3339 UTC timestamp.
    pub fn time_utc(&self) -> String {
        crate::utc::rfc3339(self.time_unix_ms)
    }

    /// This decision within the bounds a line keeps.
    fn bounded(&self) -> Decision {
        Decision {
            time_unix_ms: self.time_unix_ms,
            path: self.path,
            container: cut(&self.container, MAX_CONTAINER_BYTES).to_owned(),
            profiles: self
                .profiles
                .iter()
                .take(MAX_PROFILES)
                .map(|p| cut(p, MAX_PROFILE_BYTES).to_owned())
                .collect(),
            reason: self.reason,
            message: cut(self.message.lines().next().unwrap_or(""), MAX_MESSAGE_BYTES).to_owned(),
            pod: self.pod.clone().filter(Pod::is_well_formed),
        }
    }

    /// The line written for this decision: one JSON object and a newline, at most
    /// [`MAX_LINE_BYTES`].
    pub fn to_line(&self) -> Vec<u8> {
        let mut d = self.bounded();
        loop {
            let mut line = serde_json::to_vec(&d).unwrap_or_default();
            line.push(b'\n');
            if line.len() <= MAX_LINE_BYTES || d.message.is_empty() {
                return line;
            }
            // Escapes (a control character is six bytes) made it too long: halve the message.
            let half = d.message.len() / 2;
            d.message = cut(&d.message, half).to_owned();
        }
    }

    /// The decision a line holds (without its newline); `None` for anything else.
    pub fn from_line(line: &[u8]) -> Option<Decision> {
        if line.len() > MAX_LINE_BYTES {
            return None;
        }
        let mut d: Decision = serde_json::from_slice(line).ok()?;
        d.pod = d.pod.filter(Pod::is_well_formed);
        Some(d)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The decisions in `bytes`, whole lines each ending in a newline; also how many lines were
/// not decisions.
pub(crate) fn parse_lines(bytes: &[u8]) -> (Vec<Decision>, u64) {
    let mut decisions = Vec::new();
    let mut malformed = 0;
    for line in bytes.split(|b| *b == b'\n') {
        if line.is_empty() {
            continue;
        }
        match Decision::from_line(line) {
            Some(d) => decisions.push(d),
            None => malformed += 1,
        }
    }
    (decisions, malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(message: &str) -> Decision {
        Decision {
            time_unix_ms: 1,
            path: EnginePath::Shim,
            container: "c".repeat(300),
            profiles: (0..40).map(|i| format!("p{i}")).collect(),
            reason: Reason::Policy,
            message: message.into(),
            pod: Pod::new(
                &"n".repeat(crate::pod::MAX_NAMESPACE_BYTES),
                &"p".repeat(crate::pod::MAX_POD_NAME_BYTES),
                &"a".repeat(crate::pod::MAX_UID_BYTES),
            ),
        }
    }

    #[test]
    fn a_line_is_bounded_whatever_the_message_holds() {
        for message in [
            "x".repeat(100_000),
            "\u{1}".repeat(100_000),
            "é".repeat(10_000),
            "\"\\".repeat(10_000),
        ] {
            let line = decision(&message).to_line();
            assert!(line.len() <= MAX_LINE_BYTES, "{}", line.len());
            assert!(line.ends_with(b"\n") && !line[..line.len() - 1].contains(&b'\n'));
            let back = Decision::from_line(&line[..line.len() - 1]).unwrap();
            assert_eq!(back.container.len(), MAX_CONTAINER_BYTES);
            assert_eq!(back.profiles.len(), MAX_PROFILES);
            assert!(message.starts_with(&back.message) && !back.message.is_empty());
            assert_eq!(back.pod, decision("").pod, "the pod is kept whole");
        }
    }

    #[test]
    fn a_pod_is_kept_when_well_formed_and_dropped_when_not() {
        let mut d = Decision::now(EnginePath::Hook, "c", vec![], Reason::Policy, "m");
        let line = d.to_line();
        assert!(
            !String::from_utf8_lossy(&line).contains("pod"),
            "no key without a pod"
        );
        assert_eq!(
            Decision::from_line(&line[..line.len() - 1]).unwrap().pod,
            None
        );
        d.pod = Some(Pod {
            namespace: "default".into(),
            name: "evil\u{1b}[2J".into(),
            uid: "1".into(),
        });
        let line = d.to_line();
        assert_eq!(
            Decision::from_line(&line[..line.len() - 1]).unwrap().pod,
            None
        );
        let written = br#"{"time_unix_ms":2,"path":"hook","container":"x","reason":"host","message":"m","pod":{"namespace":"Bad NS","name":"p","uid":"1"}}"#;
        let back = Decision::from_line(written).expect("the decision is read without its pod");
        assert_eq!(back.pod, None);
        let good = d.of_pod(Pod::new("default", "web", "1a-2b"));
        let line = good.to_line();
        assert_eq!(
            Decision::from_line(&line[..line.len() - 1]).unwrap().pod,
            Pod::new("default", "web", "1a-2b")
        );
    }

    #[test]
    fn only_the_first_line_of_the_message_is_kept() {
        let line = decision("first\nsecond").to_line();
        let back = Decision::from_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(back.message, "first");
    }

    #[test]
    fn lines_that_are_not_decisions_are_counted_and_skipped() {
        let mut bytes = decision("ok").to_line();
        bytes.extend_from_slice(b"not json\n{\"time_unix_ms\":1}\n\n");
        bytes.extend_from_slice(
            br#"{"time_unix_ms":2,"path":"nri","container":"x","reason":"newer_word","message":"m","extra":1}"#,
        );
        bytes.push(b'\n');
        bytes.extend_from_slice(
            br#"{"time_unix_ms":2,"path":"dra","container":"x","reason":"host","message":"m"}"#,
        );
        let (decisions, malformed) = parse_lines(&bytes);
        assert_eq!(decisions.len(), 2);
        assert_eq!(decisions[1].reason, Reason::Other);
        assert!(decisions[1].profiles.is_empty());
        assert_eq!(malformed, 3);
    }
}
