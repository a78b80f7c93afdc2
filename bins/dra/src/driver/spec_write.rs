//! Writing a planned claim's files, all or nothing: its device metadata files first, so that no
//! spec names a missing one, then one transient CDI spec per profile
//! (<https://github.com/cncf-tags/container-device-interface/blob/main/SPEC.md>); a failure removes
//! what the call wrote, so that a refused prepare leaves nothing for a container to find.

use tracing::warn;

use super::plan::ProfilePlan;
use super::Driver;
use crate::checkpoint::{ClaimEntry, MetadataMount};
use crate::claim_spec;
use crate::device_metadata::MetadataFile;
use crate::prepared::ClaimRef;

impl Driver {
    /// Writes the planned specs; returns the claim's checkpoint entry, which holds the answer.
    /// A failure removes what this call wrote.
    /// The claim's device metadata files come first, so that no spec names a missing one.
    pub(super) fn write(
        &self,
        claim: &ClaimRef,
        plans: Vec<ProfilePlan>,
        metadata: Vec<(MetadataFile, MetadataMount)>,
    ) -> Result<ClaimEntry, String> {
        let mut entry = ClaimEntry {
            claim: claim.clone(),
            profiles: Vec::new(),
            spec_files: Vec::new(),
            devices: Vec::new(),
            boot_id: self.boot_id.clone(),
            metadata: Vec::new(),
        };
        let (files, mounts): (Vec<_>, Vec<_>) = metadata.into_iter().unzip();
        if let Err(e) = self.write_metadata(&files) {
            self.remove_metadata(&claim.uid);
            return Err(e);
        }
        entry.metadata = mounts;
        for plan in plans {
            if let Err(e) = claim_spec::write(&self.config.spec, &plan.spec) {
                self.undo(&claim.uid, &entry.spec_files);
                return Err(e.to_string());
            }
            entry.profiles.push(plan.profile);
            entry.spec_files.push(plan.spec.file_name);
            entry.devices.extend(plan.answer);
        }
        Ok(entry)
    }

    /// Removes the specs and device metadata files of claim `uid` a failed prepare wrote;
    /// what cannot be removed is logged (the kubelet's next prepare or unprepare of the claim
    /// removes it).
    pub(super) fn undo(&self, uid: &str, spec_files: &[String]) {
        for file in spec_files {
            if let Err(e) = claim_spec::remove_file(&self.config.spec, file) {
                warn!(%file, error = %e, "could not remove a claim spec after a failed prepare");
            }
        }
        self.remove_metadata(uid);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::driver::fixtures::{
        allocation, claim_object, claim_ref, demo, node, result, written, Node, BOOT, OTHER_UID,
        UID,
    };
    use crate::naming;

    /// The plan and device metadata of claim [`UID`] of device `demo-0` for request `gpu`.
    fn planned(node: &Node) -> (Vec<ProfilePlan>, Vec<(MetadataFile, MetadataMount)>) {
        let object = claim_object(UID, vec![result("gpu", "node-a/demo", "demo-0")], None);
        let mut requests = BTreeMap::new();
        let plans = node
            .driver
            .plan(
                "the claim",
                UID,
                &allocation(node, &object),
                &mut requests,
                false,
            )
            .unwrap();
        let metadata = node.driver.metadata(&object, requests).unwrap();
        (plans, metadata)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_planned_files_are_written_and_the_entry_names_them() {
        let node = node(&[demo("", "")], 1);
        let (plans, metadata) = planned(&node);
        let entry = node.driver.write(&claim_ref(UID), plans, metadata).unwrap();
        let spec = naming::claim_spec_file("devinject.io", "demo", UID);
        assert_eq!(entry.claim, claim_ref(UID));
        assert_eq!(entry.profiles, ["demo"]);
        assert_eq!(entry.spec_files, std::slice::from_ref(&spec));
        assert_eq!(entry.boot_id.as_deref(), Some(BOOT));
        assert_eq!(entry.devices.len(), 1);
        assert_eq!(entry.devices[0].device_name, "demo-0");
        assert!(node.cdi().join(&spec).is_file());
        assert_eq!(entry.metadata.len(), 1);
        assert_eq!(entry.metadata[0].device, "demo-0");
        assert!(node.metadata_dir().join(&entry.metadata[0].file).is_file());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn undo_removes_the_claims_specs_and_metadata_and_nothing_of_another_claim() {
        let node = node(&[demo("", "")], 1);
        let other = written(
            &node,
            OTHER_UID,
            vec![result("gpu", "node-a/demo", "demo-0")],
        );
        let (plans, metadata) = planned(&node);
        let entry = node.driver.write(&claim_ref(UID), plans, metadata).unwrap();
        node.driver.undo(UID, &entry.spec_files);
        assert!(!node.cdi().join(&entry.spec_files[0]).exists());
        assert!(!node.metadata_dir().join(&entry.metadata[0].file).exists());
        assert!(node.cdi().join(&other.spec_files[0]).is_file());
        assert!(node.metadata_dir().join(&other.metadata[0].file).is_file());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn metadata_that_cannot_be_written_fails_the_write_before_any_spec() {
        let node = node(&[demo("", "")], 1);
        // Where the metadata directory would be made, a file.
        std::fs::create_dir_all(node.root.join("plugins")).unwrap();
        std::fs::write(node.root.join("plugins/devinject.io"), "").unwrap();
        let (plans, metadata) = planned(&node);
        let err = node
            .driver
            .write(&claim_ref(UID), plans, metadata)
            .unwrap_err();
        assert!(err.starts_with("the device metadata directory"), "{err}");
        let spec = naming::claim_spec_file("devinject.io", "demo", UID);
        assert!(!node.cdi().join(spec).exists(), "no spec written");
    }
}
