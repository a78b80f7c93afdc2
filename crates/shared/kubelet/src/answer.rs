//! What the kubelet lists for one container: the policy's input, and the versioned JSON
//! `devinject-podresources` prints.
//!
//! ```json
//! {"version":1,"answered_by":"Get","pods":[
//!   {"container":"found","devices":{"devinject.io/demo":["0","1"]}}]}
//! ```
//!
//! - `pods` has one entry per pod of that name and namespace the kubelet lists: none when it
//!   does not know the pod, more than one only while a pod of the same name is being replaced.
//! - Each entry is `{"container":"found","devices":{...}}`, the device ids the container got
//!   per resource name (the kubelet's entries for one resource on several NUMA nodes merged, in
//!   the kubelet's order), or `{"container":"missing","listed":[...]}`, the containers the
//!   kubelet lists for the pod instead.
//! - `answered_by` is `Get` or `List`, for logs.
//!
//! A reader refuses unknown fields and any other `version`: a script reading the output of
//! another release fails with a message saying so, never with a guess. The document is at most
//! [`MAX_ANSWER_BYTES`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The version this crate writes and reads.
pub const ANSWER_VERSION: u32 = 1;

/// The largest answer written or read. One container's device ids are far below this.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The RPC that answered a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rpc {
    /// `PodResourcesLister/Get`.
    Get,
    /// `PodResourcesLister/List`.
    List,
}

impl std::fmt::Display for Rpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Rpc::Get => "Get",
            Rpc::List => "List",
        })
    }
}

/// What the kubelet lists for one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// [`ANSWER_VERSION`].
    pub version: u32,
    /// Which RPC answered.
    pub answered_by: Rpc,
    /// One entry per pod of that name and namespace.
    pub pods: Vec<PodEntry>,
}

/// One listed pod, seen from the container asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "container", rename_all = "snake_case", deny_unknown_fields)]
pub enum PodEntry {
    /// The pod lists the container.
    Found {
        /// Device ids per resource name; a resource the container did not get is absent.
        devices: BTreeMap<String, Vec<String>>,
    },
    /// The pod does not list the container.
    Missing {
        /// The containers it lists.
        listed: Vec<String>,
    },
}

impl PodEntry {
    /// A container that got `grants`, as (resource name, device ids) pairs.
    pub fn found(grants: &[(&str, &[&str])]) -> Self {
        Self::Found {
            devices: grants
                .iter()
                .map(|(resource, ids)| {
                    (
                        (*resource).to_owned(),
                        ids.iter().map(|id| (*id).to_owned()).collect(),
                    )
                })
                .collect(),
        }
    }
}

/// Why an answer cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum AnswerError {
    /// More than [`MAX_ANSWER_BYTES`].
    #[error("the answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// Another version than [`ANSWER_VERSION`].
    #[error("the answer has version {found}, this side reads version {ANSWER_VERSION}")]
    Version {
        /// The version found.
        found: u64,
    },
    /// Not the JSON described above.
    #[error("the answer is not a version {ANSWER_VERSION} answer: {message}")]
    Malformed {
        /// The parser's message.
        message: String,
    },
}

/// Only the version, read first so that a newer shape is reported as such.
#[derive(Deserialize)]
struct Versioned {
    version: Option<u64>,
}

impl Answer {
    /// An answer of the current version.
    pub fn new(answered_by: Rpc, pods: Vec<PodEntry>) -> Self {
        Self {
            version: ANSWER_VERSION,
            answered_by,
            pods,
        }
    }

    /// The JSON document, one line with a final newline.
    pub fn to_json(&self) -> Result<Vec<u8>, AnswerError> {
        let mut out = serde_json::to_vec(self).map_err(|e| AnswerError::Malformed {
            message: e.to_string(),
        })?;
        out.push(b'\n');
        if out.len() > MAX_ANSWER_BYTES {
            return Err(AnswerError::TooLarge {
                limit: MAX_ANSWER_BYTES,
            });
        }
        Ok(out)
    }

    /// Reads a document written by [`Answer::to_json`].
    pub fn parse(bytes: &[u8]) -> Result<Self, AnswerError> {
        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(AnswerError::TooLarge {
                limit: MAX_ANSWER_BYTES,
            });
        }
        let malformed = |e: serde_json::Error| AnswerError::Malformed {
            message: e.to_string(),
        };
        let probe: Versioned = serde_json::from_slice(bytes).map_err(malformed)?;
        match probe.version {
            Some(v) if v == u64::from(ANSWER_VERSION) => {}
            Some(found) => return Err(AnswerError::Version { found }),
            None => {
                return Err(AnswerError::Malformed {
                    message: "no `version` field".into(),
                })
            }
        }
        serde_json::from_slice(bytes).map_err(malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_shape() {
        let a = Answer::new(
            Rpc::Get,
            vec![
                PodEntry::found(&[("devinject.io/demo", &["0", "1"])]),
                PodEntry::Missing {
                    listed: vec!["main".into(), "side".into()],
                },
            ],
        );
        let json = a.to_json().unwrap();
        assert_eq!(
            String::from_utf8(json.clone()).unwrap(),
            "{\"version\":1,\"answered_by\":\"Get\",\"pods\":[\
             {\"container\":\"found\",\"devices\":{\"devinject.io/demo\":[\"0\",\"1\"]}},\
             {\"container\":\"missing\",\"listed\":[\"main\",\"side\"]}]}\n"
        );
        assert_eq!(Answer::parse(&json), Ok(a));
        let unknown_pod = Answer::new(Rpc::List, vec![]);
        assert_eq!(
            Answer::parse(&unknown_pod.to_json().unwrap()),
            Ok(unknown_pod)
        );
    }

    #[test]
    fn other_versions_and_shapes_are_refused() {
        let err = Answer::parse(br#"{"version":2,"anything":"else"}"#).unwrap_err();
        assert_eq!(err, AnswerError::Version { found: 2 });
        assert!(err.to_string().contains("version 2"), "{err}");
        for bad in [
            &b""[..],
            b"garbage",
            b"[1]",
            br#"{"answered_by":"Get","pods":[]}"#,
            br#"{"version":"1","answered_by":"Get","pods":[]}"#,
            br#"{"version":1,"answered_by":"Watch","pods":[]}"#,
            br#"{"version":1,"answered_by":"Get","pods":[],"extra":1}"#,
            br#"{"version":1,"answered_by":"Get","pods":[{"container":"found"}]}"#,
            br#"{"version":1,"answered_by":"Get","pods":[{"container":"gone","listed":[]}]}"#,
            br#"{"version":1,"answered_by":"Get","pods":[{"container":"missing","listed":[],"devices":{}}]}"#,
            br#"{"version":1,"answered_by":"Get","pods":[]} trailing"#,
        ] {
            let err = Answer::parse(bad).unwrap_err();
            assert!(
                matches!(err, AnswerError::Malformed { .. }),
                "{}: {err}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn size_is_bounded_both_ways() {
        let ids: Vec<String> = (0..200_000).map(|i| i.to_string()).collect();
        let big = Answer::new(
            Rpc::List,
            vec![PodEntry::Found {
                devices: [("r".to_owned(), ids)].into(),
            }],
        );
        let err = big.to_json().unwrap_err();
        assert_eq!(
            err,
            AnswerError::TooLarge {
                limit: MAX_ANSWER_BYTES
            }
        );
        let mut padded = br#"{"version":1,"answered_by":"Get","pods":[]}"#.to_vec();
        padded.resize(MAX_ANSWER_BYTES + 1, b' ');
        assert!(matches!(
            Answer::parse(&padded),
            Err(AnswerError::TooLarge { .. })
        ));
    }
}
