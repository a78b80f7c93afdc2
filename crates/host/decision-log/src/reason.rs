//! Why a container start was refused: one word per documented exit code of the hook and the
//! shim (`devinject_exit::ExitCode`, docs/hook.md), with the same meaning, so that a metric's
//! `reason` label, the decision log and the exit code a runtime reports agree.

use std::fmt;

use devinject_exit::ExitCode;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a start was refused. Each word is a documented exit code's meaning; [`Reason::Other`]
/// stands for a word this release does not know (an entry a newer release wrote), so reading
/// never fails on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Exit code 1: a bug or an unexpected failure.
    Internal,
    /// Exit code 2: bad command line.
    Usage,
    /// Exit code 3: the host config or a profile is invalid.
    Config,
    /// Exit code 4: the OCI state or `config.json` is malformed, or the wrong hook stage.
    Input,
    /// Exit code 5: the container's request is invalid (unknown or duplicate id, malformed list).
    Request,
    /// Exit code 6: the host lacks a device or driver file the request needs.
    Host,
    /// Exit code 7: creating nodes, mounts or links in the container failed.
    Inject,
    /// Exit code 8: device cgroup rules could not be set.
    Cgroup,
    /// Exit code 9: the request is not allowed by the request policy, or the kubelet could not
    /// be asked.
    Policy,
    /// Exit code 10: a profile's prepare step failed.
    Prepare,
    /// A word this release does not know.
    Other,
}

impl Reason {
    /// Every reason, in exit-code order, [`Reason::Other`] last: the label values a metric
    /// can set up front.
    pub const ALL: [Reason; 11] = [
        Reason::Internal,
        Reason::Usage,
        Reason::Config,
        Reason::Input,
        Reason::Request,
        Reason::Host,
        Reason::Inject,
        Reason::Cgroup,
        Reason::Policy,
        Reason::Prepare,
        Reason::Other,
    ];

    /// The word, snake_case and safe as a Prometheus label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Internal => "internal",
            Reason::Usage => "usage",
            Reason::Config => "config",
            Reason::Input => "input",
            Reason::Request => "request",
            Reason::Host => "host",
            Reason::Inject => "inject",
            Reason::Cgroup => "cgroup",
            Reason::Policy => "policy",
            Reason::Prepare => "prepare",
            Reason::Other => "other",
        }
    }

    /// The reason a word names; an unknown word is [`Reason::Other`].
    pub fn parse(word: &str) -> Reason {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == word)
            .unwrap_or(Reason::Other)
    }
}

impl From<ExitCode> for Reason {
    /// The reason of a failed start that exited with `code` (success is no refusal: it maps to
    /// [`Reason::Other`]).
    fn from(code: ExitCode) -> Self {
        match code {
            ExitCode::Success => Reason::Other,
            ExitCode::Internal => Reason::Internal,
            ExitCode::Usage => Reason::Usage,
            ExitCode::Config => Reason::Config,
            ExitCode::Input => Reason::Input,
            ExitCode::Request => Reason::Request,
            ExitCode::Host => Reason::Host,
            ExitCode::Inject => Reason::Inject,
            ExitCode::Cgroup => Reason::Cgroup,
            ExitCode::Policy => Reason::Policy,
            ExitCode::Prepare => Reason::Prepare,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let word = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Reason::parse(&word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every failing exit code has its own word, and the words read back as the same reason.
    #[test]
    fn each_failing_exit_code_has_its_own_word_that_reads_back() {
        let mut words: Vec<&str> = ExitCode::all()
            .into_iter()
            .filter(|c| *c != ExitCode::Success)
            .map(|c| Reason::from(c).as_str())
            .collect();
        for w in &words {
            assert_eq!(Reason::parse(w).as_str(), *w);
            assert!(w.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{w}");
        }
        let n = words.len();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), n, "two exit codes share a word");
        assert_eq!(n + 1, Reason::ALL.len());
    }

    #[test]
    fn an_unknown_word_reads_as_other() {
        assert_eq!(Reason::parse("quota"), Reason::Other);
        let r: Reason = serde_json::from_str("\"\\u0000x\"").unwrap();
        assert_eq!(r, Reason::Other);
    }
}
