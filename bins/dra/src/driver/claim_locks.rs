//! One lock per claim, so that the calls about one claim (the kubelet's prepare and unprepare,
//! a lost spec put back, a prepare before binding) never interleave while calls about different
//! claims never wait for each other (docs/security.md). A claim's entry lives only while a call
//! holds or waits for its lock, so the map does not grow with every claim the node has seen.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// A lock per claim UID, kept only while someone holds or waits for it.
#[derive(Default)]
pub(super) struct ClaimLocks(Arc<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>);

/// A held [`ClaimLocks`] entry; dropping it forgets the entry when nobody else wants it.
pub(super) struct ClaimGuard {
    locks: Arc<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>,
    uid: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl ClaimLocks {
    /// Waits for claim `uid`'s lock.
    pub(super) async fn lock(&self, uid: &str) -> ClaimGuard {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(map.entry(uid.to_owned()).or_default())
        };
        let mut guard = ClaimGuard {
            locks: Arc::clone(&self.0),
            uid: uid.to_owned(),
            guard: None,
        };
        guard.guard = Some(lock.lock_owned().await);
        guard
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        // Only the map holds it now: nobody holds or waits for this claim.
        if map
            .get(&self.uid)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            map.remove(&self.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    /// Polls `future` once: whether it is done now.
    fn ready<F: Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        match future.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    /// The claims the map holds an entry for.
    fn held(locks: &ClaimLocks) -> Vec<String> {
        let mut uids: Vec<String> = locks.0.lock().unwrap().keys().cloned().collect();
        uids.sort();
        uids
    }

    #[test]
    fn a_claims_second_lock_waits_until_the_first_is_dropped() {
        let locks = ClaimLocks::default();
        let first = ready(pin!(locks.lock("a"))).expect("a free lock is taken at once");
        let mut second = pin!(locks.lock("a"));
        assert!(ready(second.as_mut()).is_none(), "held: the second waits");
        assert!(ready(second.as_mut()).is_none(), "still held");
        drop(first);
        assert!(
            ready(second.as_mut()).is_some(),
            "released: the second has it"
        );
    }

    #[test]
    fn another_claims_lock_is_taken_while_one_is_held() {
        let locks = ClaimLocks::default();
        let _a = ready(pin!(locks.lock("a"))).unwrap();
        let b = ready(pin!(locks.lock("b")));
        assert!(b.is_some(), "claim b does not wait for claim a");
        assert_eq!(held(&locks), ["a", "b"]);
    }

    #[test]
    fn a_claim_is_forgotten_once_nobody_holds_or_waits_for_it() {
        let locks = ClaimLocks::default();
        let first = ready(pin!(locks.lock("a"))).unwrap();
        {
            let mut waiting = pin!(locks.lock("a"));
            assert!(ready(waiting.as_mut()).is_none());
            drop(first);
            assert_eq!(held(&locks), ["a"], "kept for the one waiting");
            let second = ready(waiting.as_mut()).unwrap();
            assert_eq!(held(&locks), ["a"], "kept while held");
            drop(second);
        }
        assert!(held(&locks).is_empty(), "nobody holds or waits: forgotten");
        // And taken again at once.
        assert!(ready(pin!(locks.lock("a"))).is_some());
    }
}
