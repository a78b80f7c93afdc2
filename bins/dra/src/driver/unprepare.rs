//! The kubelet's unprepare of one claim: under the claim's lock, every spec a prepare of the
//! claim can have written removed by its name (whether or not its checkpoint entry was saved:
//! each name is the claim's own, so nothing of another claim goes), then its device metadata
//! files, then its checkpoint entry.

use std::collections::BTreeSet;

use tracing::info;

use super::claim_label::label;
use super::Driver;
use crate::claim_spec;
use crate::naming;
use crate::prepared::{ClaimRef, Deadline};

impl Driver {
    /// [`crate::prepared::Claims::unprepare`].
    pub(super) async fn unprepare_claim(
        &self,
        claim: ClaimRef,
        deadline: Deadline,
    ) -> Result<(), String> {
        let (what, uid) = label(&claim)?;
        let _claim = deadline.run(self.busy.lock(&uid)).await.ok_or_else(|| {
            format!(
                "{what}: not unprepared within the kubelet's deadline ({} ms), waiting for its \
                 prepare to finish; the kubelet will retry",
                deadline.budget().as_millis()
            )
        })?;
        // The names a prepare of this claim can have written, whether or not its checkpoint
        // entry was saved (a driver killed between the spec and the checkpoint): each is this
        // claim's own, so removing them removes nothing of another's.
        let mut files: BTreeSet<String> = self
            .config
            .profiles
            .iter()
            .map(|p| naming::claim_spec_file(&self.config.spec.driver, p.name.as_str(), &uid))
            .collect();
        if let Some(entry) = self.entry(&uid) {
            files.extend(entry.spec_files.iter().cloned());
        }
        let mut removed = 0;
        for file in &files {
            if claim_spec::remove_file(&self.config.spec, file)
                .map_err(|e| format!("{what}: {e}"))?
            {
                removed += 1;
            }
        }
        let metadata = self.remove_metadata(&uid);
        self.save(&uid, None)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        info!(claim = %what, specs = removed, metadata, "unprepared");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::driver::fixtures::{
        claim_ref, demo, node, prepared, result, written, OTHER_UID, UID,
    };

    fn deadline() -> Deadline {
        Deadline::after(Duration::from_secs(30))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_claims_specs_metadata_and_entry_go_and_another_claims_stay() {
        let node = node(&[demo("", "")], 1);
        let entry = prepared(&node, UID, vec![result("gpu", "node-a/demo", "demo-0")]).await;
        let other = prepared(
            &node,
            OTHER_UID,
            vec![result("gpu", "node-a/demo", "demo-0")],
        )
        .await;
        node.driver
            .unprepare_claim(claim_ref(UID), deadline())
            .await
            .unwrap();
        assert!(!node.cdi().join(&entry.spec_files[0]).exists());
        assert!(!node.metadata_dir().join(&entry.metadata[0].file).exists());
        assert_eq!(node.driver.entry(UID), None);
        assert!(node.cdi().join(&other.spec_files[0]).is_file());
        assert!(node.metadata_dir().join(&other.metadata[0].file).is_file());
        assert_eq!(node.driver.entry(OTHER_UID), Some(other));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_spec_written_before_its_entry_was_saved_is_removed_by_its_name() {
        let node = node(&[demo("", "")], 1);
        let entry = written(&node, UID, vec![result("gpu", "node-a/demo", "demo-0")]);
        assert_eq!(node.driver.entry(UID), None);
        node.driver
            .unprepare_claim(claim_ref(UID), deadline())
            .await
            .unwrap();
        assert!(!node.cdi().join(&entry.spec_files[0]).exists());
        assert!(!node.metadata_dir().join(&entry.metadata[0].file).exists());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_never_prepared_is_unprepared_without_error() {
        let node = node(&[demo("", "")], 1);
        node.driver
            .unprepare_claim(claim_ref(UID), deadline())
            .await
            .unwrap();
        let err = node
            .driver
            .unprepare_claim(claim_ref("a/b"), deadline())
            .await
            .unwrap_err();
        assert!(err.contains("a/b"), "{err}");
    }
}
