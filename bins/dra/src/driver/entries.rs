//! The driver's reads and writes of its checkpoint ([`crate::checkpoint`]): one claim's entry or
//! every entry copied out, and one claim recorded or forgotten with the file saved. Each holds
//! the checkpoint's lock for that alone, the write off the async thread, so that no claim's API
//! read or prepare program waits on another claim's checkpoint update.

use std::sync::Arc;

use super::Driver;
use crate::checkpoint::ClaimEntry;

impl Driver {
    /// The checkpoint entry of claim `uid`, copied out under a short lock.
    pub(super) fn entry(&self, uid: &str) -> Option<ClaimEntry> {
        let checkpoint = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        checkpoint.get(uid).cloned()
    }

    /// Every claim the checkpoint holds, copied out under a short lock.
    pub fn prepared(&self) -> Vec<ClaimEntry> {
        let checkpoint = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        checkpoint.claims().map(|(_, e)| e.clone()).collect()
    }

    /// Records (`Some`) or forgets (`None`) claim `uid` and saves the checkpoint, off the
    /// async thread, the lock held for this one update and the atomic write only.
    pub(super) async fn save(
        &self,
        uid: &str,
        entry: Option<ClaimEntry>,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        let checkpoint = Arc::clone(&self.checkpoint);
        let uid = uid.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut checkpoint = checkpoint.lock().unwrap_or_else(|p| p.into_inner());
            match entry {
                Some(entry) => checkpoint.insert(&uid, entry),
                None => checkpoint.remove(&uid).map(drop),
            }
        })
        .await
        .unwrap_or_else(|e| {
            Err(crate::checkpoint::CheckpointError::Entry {
                uid: String::new(),
                problem: format!("the checkpoint's task failed: {e}"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;
    use crate::driver::fixtures::{claim_ref, demo, node, BOOT, OTHER_UID, UID};

    fn entry(uid: &str) -> ClaimEntry {
        ClaimEntry {
            claim: claim_ref(uid),
            profiles: vec!["demo".into()],
            spec_files: vec![crate::naming::claim_spec_file("devinject.io", "demo", uid)],
            devices: Vec::new(),
            boot_id: Some(BOOT.into()),
            metadata: Vec::new(),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_saved_entry_is_read_back_and_is_in_the_file() {
        let node = node(&[demo("", "")], 1);
        assert_eq!(node.driver.entry(UID), None);
        node.driver.save(UID, Some(entry(UID))).await.unwrap();
        node.driver
            .save(OTHER_UID, Some(entry(OTHER_UID)))
            .await
            .unwrap();
        assert_eq!(node.driver.entry(UID), Some(entry(UID)));
        assert_eq!(node.driver.prepared(), [entry(UID), entry(OTHER_UID)]);
        let on_disk = Checkpoint::load(&node.driver.config.checkpoint).unwrap();
        assert_eq!(on_disk.get(UID), Some(&entry(UID)));
        assert_eq!(on_disk.claims().count(), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_forgotten_entry_is_gone_from_memory_and_the_file_and_the_others_stay() {
        let node = node(&[demo("", "")], 1);
        node.driver.save(UID, Some(entry(UID))).await.unwrap();
        node.driver
            .save(OTHER_UID, Some(entry(OTHER_UID)))
            .await
            .unwrap();
        node.driver.save(UID, None).await.unwrap();
        assert_eq!(node.driver.entry(UID), None);
        assert_eq!(node.driver.prepared(), [entry(OTHER_UID)]);
        let on_disk = Checkpoint::load(&node.driver.config.checkpoint).unwrap();
        assert_eq!(on_disk.get(UID), None);
        assert_eq!(on_disk.get(OTHER_UID), Some(&entry(OTHER_UID)));
        // Forgetting a claim never recorded is no error.
        node.driver.save(UID, None).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_entry_of_another_claim_is_refused_and_nothing_is_recorded() {
        let node = node(&[demo("", "")], 1);
        let err = node
            .driver
            .save(UID, Some(entry(OTHER_UID)))
            .await
            .unwrap_err();
        assert!(
            matches!(err, crate::checkpoint::CheckpointError::Entry { .. }),
            "{err}"
        );
        assert!(node.driver.prepared().is_empty());
    }
}
