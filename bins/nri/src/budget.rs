//! The request budget: how long the plugin may take to answer the runtime about one container.
//!
//! # Why
//! NRI gives a plugin a timeout per request (containerd's `plugin_request_timeout` in
//! `[plugins."io.containerd.nri.v1.nri"]`, CRI-O's `nri_plugin_request_timeout` in `[crio.nri]`;
//! 2 s by default in both); a plugin that answers later is closed, and the runtime creates
//! that container, and every other until the plugin connects again, without it. A profile's
//! prepare step runs inside the answer, so one pod choosing a slow function would take devinject
//! off the node for everyone. Every request is therefore answered within a budget safely below that
//! timeout, whatever a prepare step or the kubelet does: the lesser of `nri_request_budget_ms` (the
//! host configuration, 1.5 s by default) and three quarters of the timeout the runtime announces at
//! `Configure` (NRI 0.8 and later: containerd 2.x, CRI-O 1.36; containerd 1.7 announces none). A
//! request that runs out of budget fails only its own container, with [`BudgetError`]'s message
//! naming the settings to raise.

use std::time::Duration;

use devinject_contained::prepare_step::Step;

/// The plugin's budget per request: the configured one and the runtime's timeout, when known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBudget {
    /// `nri_request_budget_ms`.
    pub configured: Duration,
    /// The runtime's request timeout, when it announced it.
    pub runtime_timeout: Option<Duration>,
}

impl RequestBudget {
    /// The budget a request gets: the configured one, and at most three quarters of the
    /// runtime's timeout (the rest covers killing a step, answering and the runtime's side).
    pub fn get(&self) -> Duration {
        match self.runtime_timeout {
            Some(timeout) => self.configured.min(timeout * 3 / 4),
            None => self.configured,
        }
    }

    /// The runtime's timeout in words, for messages.
    fn runtime_timeout_words(&self) -> String {
        match self.runtime_timeout {
            Some(t) => format!("{} ms here", t.as_millis()),
            None => "2 s by default".to_owned(),
        }
    }
}

impl std::fmt::Display for RequestBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NRI request budget of {} ms", self.get().as_millis())
    }
}

/// The fix, said once for every budget error.
const FIX: &str = "raise it (containerd: plugin_request_timeout in [plugins.\"io.containerd.nri.v1.nri\"]; CRI-O: nri_plugin_request_timeout in [crio.nri]) and devinject's nri_request_budget_ms (the host configuration) to at most three quarters of it, or run such pods with the devinject runtime (runtimeClassName: devinject), which has no such limit";

/// A request that ran out of its budget. The container fails; the plugin stays connected.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// A prepare step was killed at the budget, or not started for want of it.
    #[error("{step} did not finish within the {budget} and was killed: the runtime drops an NRI plugin that answers later than its request timeout ({}); for a slower function {FIX}", budget.runtime_timeout_words())]
    PrepareStep {
        /// Which run.
        step: Box<Step>,
        budget: RequestBudget,
    },
    /// Admitting the container (the request policy asking the kubelet, the planner) took the
    /// whole budget.
    #[error("the container was not admitted within the {budget} (is the kubelet's pod-resources API slow to answer?): the runtime drops an NRI plugin that answers later than its request timeout ({}); {FIX}", budget.runtime_timeout_words())]
    Admission { budget: RequestBudget },
    /// More containers are being admitted at once than the plugin serves.
    #[error("{in_flight} containers are being admitted at once, the most the NRI plugin serves: try again")]
    Busy {
        /// How many.
        in_flight: usize,
    },
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use devinject_devices::{DeviceId, ProfileName};

    use super::*;

    fn budget(configured_ms: u64, runtime_ms: Option<u64>) -> RequestBudget {
        RequestBudget {
            configured: Duration::from_millis(configured_ms),
            runtime_timeout: runtime_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn the_budget_is_the_configured_one_within_three_quarters_of_the_runtimes_timeout() {
        assert_eq!(budget(1500, None).get(), Duration::from_millis(1500));
        assert_eq!(budget(1500, Some(2000)).get(), Duration::from_millis(1500));
        // Raised in devinject but not in containerd: containerd's timeout still holds.
        assert_eq!(
            budget(10_000, Some(2000)).get(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            budget(45_000, Some(60_000)).get(),
            Duration::from_millis(45_000)
        );
        assert_eq!(budget(1500, Some(1000)).get(), Duration::from_millis(750));
    }

    #[test]
    fn a_step_out_of_budget_names_its_profile_function_the_budget_and_the_fix() {
        let step = Step {
            profile: ProfileName::new("fpga").unwrap(),
            program: PathBuf::from("/opt/fpga/load"),
            device: DeviceId::new("1").unwrap(),
            function: Some("nlb3".into()),
        };
        let e = BudgetError::PrepareStep {
            step: Box::new(step),
            budget: budget(1500, Some(2000)),
        };
        let text = e.to_string();
        for part in [
            "the prepare program /opt/fpga/load of profile fpga for device 1 (function nlb3) did not finish within the NRI request budget of 1500 ms",
            "request timeout (2000 ms here)",
            "containerd: plugin_request_timeout in [plugins.\"io.containerd.nri.v1.nri\"]",
            "CRI-O: nri_plugin_request_timeout in [crio.nri]",
            "nri_request_budget_ms",
            "runtimeClassName: devinject",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }
}
