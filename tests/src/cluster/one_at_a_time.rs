//! One cluster at a time in a process.
//!
//! Clusters share the host's engine paths, kubelet directories in the nodes' namespaces and the
//! host's loop-back ports, so two cannot run at once. scripts/test.sh runs each file of the
//! cluster binary in a process of its own, one after the other; the token each [`super::Cluster`]
//! holds keeps a whole-binary run (`cargo test --test cluster`, every file in one process) to one
//! cluster at a time as well. A token, not a mutex guard: a cluster moves between threads.

use std::sync::{Condvar, Mutex};

static BUSY: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();

/// Held for a cluster's whole life; the next cluster starts once it is dropped.
#[derive(Debug)]
pub struct OneAtATime(());

impl OneAtATime {
    /// Waits until no other cluster of this process is running, then holds the token.
    pub fn take() -> Self {
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        while *busy {
            busy = FREED.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        *busy = true;
        Self(())
    }
}

impl Drop for OneAtATime {
    fn drop(&mut self) {
        *BUSY.lock().unwrap_or_else(|e| e.into_inner()) = false;
        FREED.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Four threads each holding the token for a while never hold it two at a time.
    #[test]
    fn never_two_at_once() {
        let holding = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (holding, most) = (holding.clone(), most.clone());
                std::thread::spawn(move || {
                    let token = OneAtATime::take();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    holding.fetch_sub(1, Ordering::SeqCst);
                    drop(token);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }
}
