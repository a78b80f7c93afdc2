//! The kubelet's pod-resources `List` read on a schedule, for the long-running components that
//! follow what the kubelet granted (the device plugin and the DRA driver each keep the other's
//! devices from their own containers): the blocking client runs off the async thread, a failed
//! call is logged once for each new message and the caller keeps what it last read, since the
//! kubelet forgets no grant while it restarts. The caller learns when the first call has
//! ended, so that it can serve only once it knows what the kubelet granted: a component that
//! starts while the other path's pods run (a node moving between the two) must not offer their
//! devices before its first read.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{info, warn};

use super::v1::PodResources;
use super::PodResourcesClient;

/// How often `List` is called: what a reader learns is at most this old.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// How long one `List` may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Calls `List` on the kubelet's socket `socket` at once and then every [`INTERVAL`], and hands
/// each answer to `each`, until it says to stop. `first_call` is told once the first call has
/// ended (within the call's 5 s timeout), after `each` had its answer if there was one.
pub async fn poll_list(
    socket: PathBuf,
    first_call: oneshot::Sender<()>,
    each: impl FnMut(&[PodResources]) -> ControlFlow<()>,
) {
    poll_every(
        PodResourcesClient::new(socket, CALL_TIMEOUT),
        INTERVAL,
        first_call,
        each,
    )
    .await;
}

async fn poll_every(
    client: PodResourcesClient,
    every: Duration,
    first_call: oneshot::Sender<()>,
    mut each: impl FnMut(&[PodResources]) -> ControlFlow<()>,
) {
    let mut first_call = Some(first_call);
    // Told whichever way the first call ends; a caller that stopped waiting is no error.
    let mut ended = || {
        if let Some(told) = first_call.take() {
            let _ = told.send(());
        }
    };
    let mut failing: Option<String> = None;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let asked = client.clone();
        // Blocking, and bounded by the client's own deadline.
        let pods = match tokio::task::spawn_blocking(move || asked.list()).await {
            Ok(Ok(pods)) => pods,
            Ok(Err(e)) => {
                let error = e.to_string();
                if failing.as_ref() != Some(&error) {
                    warn!(error = %error, "reading the kubelet's pod-resources failed; keeping what was last read");
                    failing = Some(error);
                }
                ended();
                continue;
            }
            Err(e) => {
                warn!(error = %e, "the pod-resources call did not finish");
                ended();
                continue;
            }
        };
        if failing.take().is_some() {
            info!("reading the kubelet's pod-resources works again");
        }
        let next = each(&pods);
        ended();
        if next.is_break() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_hands_nothing_on_and_the_caller_is_never_called() {
        let dir = tempfile::tempdir().unwrap();
        let client =
            PodResourcesClient::new(dir.path().join("kubelet.sock"), Duration::from_secs(1));
        let mut called = false;
        let (told, first_call) = oneshot::channel();
        let polled = tokio::time::timeout(
            Duration::from_millis(200),
            poll_every(client, Duration::from_millis(20), told, |_| {
                called = true;
                ControlFlow::Break(())
            }),
        )
        .await;
        assert!(
            polled.is_err(),
            "the poll goes on while the kubelet cannot answer"
        );
        assert!(!called);
        assert_eq!(
            first_call.await,
            Ok(()),
            "the first call's end is told though it was not answered"
        );
    }
}
