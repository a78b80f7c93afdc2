//! The `admission.k8s.io/v1` AdmissionReview exchange: the API server's request in, our answer
//! out. Only the fields a mutating webhook needs are read (the request's `uid`, `kind` and
//! `object`), through `serde_json::Value`: the Kubernetes API types crate would add a large
//! build for four fields.

use base64::Engine;
use serde_json::{json, Value};

use crate::metrics::Outcome;
use crate::mutate::{mutate, Table};

/// The most a review may be: the API server's own limit on a request body is 3 MiB.
pub const MAX_REVIEW_BYTES: usize = 3 << 20;

/// Why a review could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not JSON.
    #[error("the body is not an AdmissionReview: {0}")]
    Json(String),
    /// A field is missing.
    #[error("the AdmissionReview has no {0}")]
    Missing(&'static str),
}

/// The answer to one AdmissionReview body.
pub fn answer(table: &Table, body: &[u8]) -> Result<Value, ReviewError> {
    review(table, body).map(|(answer, _)| answer)
}

/// The answer to one AdmissionReview body, and what it says (for the metrics).
pub fn review(table: &Table, body: &[u8]) -> Result<(Value, Outcome), ReviewError> {
    let review: Value =
        serde_json::from_slice(body).map_err(|e| ReviewError::Json(e.to_string()))?;
    let request = review
        .get("request")
        .ok_or(ReviewError::Missing("request"))?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .ok_or(ReviewError::Missing("request.uid"))?;
    let is_pod = request.pointer("/kind/kind").and_then(Value::as_str) == Some("Pod")
        && request
            .pointer("/kind/group")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty();
    let (response, outcome) = match request.get("object") {
        Some(object) if is_pod => match mutate(table, object) {
            Ok(patch) if patch.is_empty() => {
                (json!({"uid": uid, "allowed": true}), Outcome::Unchanged)
            }
            Ok(patch) => {
                let bytes = serde_json::to_vec(&patch).unwrap_or_default();
                let answer = json!({
                    "uid": uid,
                    "allowed": true,
                    "patchType": "JSONPatch",
                    "patch": base64::engine::general_purpose::STANDARD.encode(bytes),
                });
                (answer, Outcome::Patched)
            }
            Err(refusal) => {
                tracing::info!(%refusal, "refused");
                let answer = json!({
                    "uid": uid,
                    "allowed": false,
                    "status": {"code": 403, "reason": "Forbidden", "message": format!("devinject: {refusal}")},
                });
                (answer, Outcome::Refused(refusal.reason()))
            }
        },
        // Not a pod (a misconfigured webhook rule): nothing to do with it.
        _ => (json!({"uid": uid, "allowed": true}), Outcome::Unchanged),
    };
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    Ok((answer, outcome))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use devinject_devices::{Profile, ProfileSet};

    use super::*;

    fn table() -> Table {
        let p = Profile::parse(
            "name = \"fpga\"\nresource = \"x.io/port\"\n[discovery]\nnodes = [\"p\"]\n[prepare]\ncommand = [\"/bin/p\"]\nfunctions = [{ id = \"f3\", resource = \"x.io/nlb3\" }]\n",
            Path::new("fpga.toml"),
        )
        .unwrap();
        Table::new(&ProfileSet::from_profiles(vec![p], Path::new("/p")).unwrap())
    }

    fn review_body(limits: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "object": {"metadata": {}, "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn allowed_with_a_patch_refused_with_a_message_or_left_alone() {
        let a = answer(&table(), &review_body(json!({"x.io/nlb3": "1"}))).unwrap();
        assert_eq!(a["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(a["response"]["uid"], "u-1");
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(a["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(a["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(patch[0]["path"], "/spec/containers/0/resources");

        let a = answer(&table(), &review_body(json!({"x.io/nlb9": "1"}))).unwrap();
        assert_eq!(a["response"]["allowed"], false);
        assert_eq!(a["response"]["status"]["code"], 403);
        assert!(a["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("devinject: container c asks for x.io/nlb9"));

        let a = answer(&table(), &review_body(json!({"cpu": "1"}))).unwrap();
        assert_eq!(a["response"], json!({"uid": "u-1", "allowed": true}));
    }

    #[test]
    fn the_outcome_says_what_the_answer_does() {
        let outcome = |limits| review(&table(), &review_body(limits)).unwrap().1;
        assert_eq!(outcome(json!({"x.io/nlb3": "1"})), Outcome::Patched);
        assert_eq!(
            outcome(json!({"x.io/nlb9": "1"})),
            Outcome::Refused("unknown_resource")
        );
        assert_eq!(outcome(json!({"cpu": "1"})), Outcome::Unchanged);
    }

    #[test]
    fn malformed_reviews_are_errors() {
        assert!(matches!(answer(&table(), b"{"), Err(ReviewError::Json(_))));
        assert!(matches!(
            answer(&table(), b"{}"),
            Err(ReviewError::Missing("request"))
        ));
        assert!(matches!(
            answer(&table(), br#"{"request": {}}"#),
            Err(ReviewError::Missing("request.uid"))
        ));
    }
}
