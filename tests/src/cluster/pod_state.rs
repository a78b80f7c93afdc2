//! Where a pod stands, in one line: what a timed-out wait on it says first, before the
//! cluster's logs, so that the reason (a container the runtime could not create, a pod the
//! scheduler could not place) is the first thing a failure shows.

use serde_json::Value;

/// The most characters kept of one message (an engine's error can quote a whole spec).
const MESSAGE_CHARS: usize = 400;

/// `pod` (its JSON) in one line: its phase and message, each condition not met with its
/// reason, and each container's waiting or terminated state with its reason and message.
pub fn pod_state(pod: &Value) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap_or("?");
    let status = &pod["status"];
    let mut parts = vec![format!(
        "pod {name} is {}",
        status["phase"].as_str().unwrap_or("without a phase")
    )];
    if let Some(message) = status["message"].as_str() {
        parts.push(clip(message));
    }
    for c in status["conditions"].as_array().into_iter().flatten() {
        if c["status"].as_str() == Some("False") {
            parts.push(format!(
                "{} false ({}): {}",
                text(&c["type"]),
                text(&c["reason"]),
                clip(c["message"].as_str().unwrap_or_default())
            ));
        }
    }
    let containers = ["initContainerStatuses", "containerStatuses"]
        .into_iter()
        .flat_map(|list| status[list].as_array().into_iter().flatten());
    for c in containers {
        for state in ["waiting", "terminated"] {
            let s = &c["state"][state];
            if s.is_object() {
                parts.push(format!(
                    "container {} {state} ({}): {}",
                    text(&c["name"]),
                    text(&s["reason"]),
                    clip(s["message"].as_str().unwrap_or_default())
                ));
            }
        }
    }
    parts.join("; ")
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

fn clip(message: &str) -> String {
    let mut chars = message.chars();
    let kept: String = chars.by_ref().take(MESSAGE_CHARS).collect();
    if chars.next().is_some() {
        format!("{kept}...")
    } else {
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_container_the_runtime_cannot_create_is_named_with_its_error() {
        let pod = json!({
            "metadata": {"name": "devinject-example-fuse"},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                     "message": "containers with unready status: [main]"}
                ],
                "containerStatuses": [{
                    "name": "main",
                    "state": {"waiting": {"reason": "CreateContainerError",
                        "message": "CDI device injection failed: unresolvable CDI devices x"}}
                }]
            }
        });
        assert_eq!(
            pod_state(&pod),
            "pod devinject-example-fuse is Pending; ContainersReady false (ContainersNotReady): \
             containers with unready status: [main]; container main waiting \
             (CreateContainerError): CDI device injection failed: unresolvable CDI devices x"
        );
    }

    #[test]
    fn an_unscheduled_pod_says_why_and_a_long_message_is_clipped() {
        let long = "x".repeat(MESSAGE_CHARS + 10);
        let pod = json!({
            "metadata": {"name": "p"},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": long}]
            }
        });
        let state = pod_state(&pod);
        assert!(
            state.starts_with("pod p is Pending; PodScheduled false (Unschedulable): xxx"),
            "{state}"
        );
        assert!(state.ends_with("x..."), "{state}");
        assert_eq!(
            state.len(),
            "pod p is Pending; PodScheduled false (Unschedulable): ...".len() + MESSAGE_CHARS
        );
        assert_eq!(pod_state(&json!({})), "pod ? is without a phase");
    }
}
