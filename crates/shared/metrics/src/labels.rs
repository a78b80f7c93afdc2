//! The label sets more than one component counts by: an outcome, or a reason, each a word
//! from the component's fixed vocabulary (never an id, a pod or a claim).

use prometheus_client::encoding::EncodeLabelSet;

/// How an operation ended (`injected`, `refused`, `applied` ...).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The word.
    pub outcome: &'static str,
}

/// Why something was refused.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The word.
    pub reason: &'static str,
}
