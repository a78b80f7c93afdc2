//! Putting back the lost CDI specs of the claims prepared in this boot. The kubelet prepares a
//! claim only when it creates the pod's sandbox, so a spec removed while the pod runs (a
//! remount, a cleanup tool, an operator) would leave a restarting container without its
//! devices: the driver rebuilds each missing spec from its checkpoint entry at start and
//! whenever inotify reports a removal in the CDI directory.

use devinject_devices::request::split_replica;
use devinject_devices::Excerpt;
use devinject_discovery::{discover, resolve_driver_files};
use tracing::warn;

use super::Driver;
use crate::checkpoint::MetadataMount;
use crate::claim_spec::{self, ClaimSpec};
use crate::naming;
use crate::prepared::PreparedDevice;
use crate::slices::device_names;
use std::sync::Arc;

/// What the driver logs for each lost claim spec it put back.
pub const RESTORED: &str = "restored a prepared claim's lost CDI spec";

impl Driver {
    /// Puts back every spec of a claim prepared in this boot that is missing from the CDI
    /// directory (emptied by a remount, a cleanup tool or an operator while its pods run: the
    /// kubelet prepares a claim only when it creates a sandbox, so a restarting container of
    /// such a pod would find no spec). Each spec is built again from the claim's devices as
    /// the checkpoint records them and discovery finds them now; the prepare steps do not run
    /// again (the devices hold what they loaded). Claims prepared before a reboot are left to
    /// the kubelet's prepare, which runs their steps. Returns how many specs were put back;
    /// what cannot be is logged.
    pub async fn restore_specs(&self) -> usize {
        let Some(boot) = &self.boot_id else {
            return 0;
        };
        let mut restored = 0;
        for listed in self.prepared() {
            if listed.boot_id.as_ref() != Some(boot) {
                continue;
            }
            let uid = listed.claim.uid.clone();
            // Under the claim's lock, as it stands then: an unprepare may have removed it.
            let _claim = self.busy.lock(&uid).await;
            let Some(entry) = self.entry(&uid) else {
                continue;
            };
            for (profile, file) in entry.profiles.iter().zip(&entry.spec_files) {
                match claim_spec::present(&self.config.spec, file) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => {
                        warn!(file = %file, error = %e, "cannot look for a prepared claim's CDI spec");
                        continue;
                    }
                }
                let what = format!(
                    "claim {}/{} ({})",
                    Excerpt(&entry.claim.namespace),
                    Excerpt(&entry.claim.name),
                    Excerpt(&uid)
                );
                match self.rebuild(&uid, profile, &entry.devices, &entry.metadata) {
                    Ok(spec) if spec.file_name == *file => {
                        match claim_spec::write(&self.config.spec, &spec) {
                            Ok(()) => {
                                restored += 1;
                                warn!(claim = %what, %file, "{RESTORED}");
                            }
                            Err(e) => {
                                warn!(claim = %what, %file, error = %e, "cannot put back a prepared claim's lost CDI spec")
                            }
                        }
                    }
                    Ok(spec) => {
                        warn!(claim = %what, %file, built = %spec.file_name, "a prepared claim's spec name changed; not put back")
                    }
                    Err(e) => {
                        warn!(claim = %what, %file, error = %e, "cannot put back a prepared claim's lost CDI spec")
                    }
                }
            }
        }
        restored
    }

    /// The spec of claim `uid` for `profile`, built again from `devices` (as prepared), with
    /// the `metadata` mounts it had.
    fn rebuild(
        &self,
        uid: &str,
        profile: &str,
        devices: &[PreparedDevice],
        metadata: &[MetadataMount],
    ) -> Result<ClaimSpec, String> {
        let p = self
            .config
            .profiles
            .get(profile)
            .ok_or_else(|| format!("profile {profile} is not served any more"))?;
        let pool = naming::pool(&self.config.node, profile);
        let inventory = discover(p, &self.config.roots)
            .map_err(|e| format!("profile {profile}: discovery: {e}"))?;
        let names = device_names(p, &inventory).map_err(|e| e.to_string())?;
        let mut pairs = Vec::new();
        for d in devices.iter().filter(|d| d.pool_name == pool) {
            let published = names.id(&d.device_name).ok_or_else(|| {
                format!(
                    "device {} is not on this node any more",
                    Excerpt(&d.device_name)
                )
            })?;
            let id = split_replica(published).map_or(published, |(id, _)| id);
            pairs.push((d.device_name.clone(), id.to_owned()));
        }
        let files = resolve_driver_files(p, &self.config.roots)
            .map_err(|e| format!("profile {profile}: driver files: {e}"))?;
        let mut spec = claim_spec::build(&self.config.spec, uid, p, &inventory, &files, &pairs)
            .map_err(|e| e.to_string())?;
        claim_spec::mount_metadata(&mut spec, uid, metadata, &self.config.metadata_dir);
        Ok(spec)
    }

    /// Keeps the specs of the claims prepared in this boot in the CDI directory: puts back
    /// what is missing now, then whenever an entry of the directory, or the directory itself,
    /// is removed or moved away (inotify). Runs until the watch cannot be made again.
    pub async fn keep_specs(self: Arc<Self>) {
        loop {
            let dir = match claim_spec::create_dir_shown(&self.config.spec) {
                Ok(dir) => dir,
                Err(e) => {
                    warn!(error = %e, "cannot make the CDI spec directory to watch it; lost claim specs are put back only at the next start");
                    return;
                }
            };
            let inotify = match inotify::Inotify::init() {
                Ok(i) => i,
                Err(e) => {
                    warn!(error = %e, "inotify is not available; lost claim specs are put back only at the next start");
                    return;
                }
            };
            use inotify::WatchMask as M;
            let mask = M::DELETE
                | M::MOVED_FROM
                | M::DELETE_SELF
                | M::MOVE_SELF
                | M::ONLYDIR
                | M::DONT_FOLLOW;
            if let Err(e) = inotify.watches().add(&dir, mask) {
                warn!(dir = %dir.display(), error = %e, "cannot watch the CDI spec directory; lost claim specs are put back only at the next start");
                return;
            }
            let mut events = match inotify.into_event_stream([0u8; 4096]) {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "cannot read inotify events; lost claim specs are put back only at the next start");
                    return;
                }
            };
            // Watching first, then looking: nothing removed in between is missed.
            self.restore_specs().await;
            loop {
                let Some(Ok(event)) = tokio_stream::StreamExt::next(&mut events).await else {
                    break;
                };
                let gone = event.mask.intersects(
                    inotify::EventMask::DELETE_SELF
                        | inotify::EventMask::MOVE_SELF
                        | inotify::EventMask::IGNORED,
                );
                // Only a claim spec's name (ours, `k8s.<driver>-*.json`) can be one to put back;
                // the temporary files of atomic writes come and go by the thousand.
                let vendor = format!("{}-", naming::cdi_vendor(&self.config.spec.driver));
                let ours = event
                    .name
                    .as_ref()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&vendor) && n.ends_with(".json"));
                if gone || ours {
                    self.restore_specs().await;
                }
                if gone {
                    // The directory went away: make it again and watch the new one.
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::fixtures::{demo, node, prepared, result, written, UID};

    #[tokio::test(flavor = "current_thread")]
    async fn a_lost_spec_of_this_boot_is_put_back_as_it_was() {
        let node = node(&[demo("", "")], 2);
        let entry = prepared(&node, UID, vec![result("gpu", "node-a/demo", "demo-1")]).await;
        let file = node.cdi().join(&entry.spec_files[0]);
        let before = std::fs::read(&file).unwrap();
        assert_eq!(node.driver.restore_specs().await, 0, "nothing lost yet");
        std::fs::remove_file(&file).unwrap();
        assert_eq!(node.driver.restore_specs().await, 1);
        assert_eq!(std::fs::read(&file).unwrap(), before);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claim_of_an_earlier_boot_is_left_to_the_kubelet() {
        let node = node(&[demo("", "")], 1);
        let mut entry = written(&node, UID, vec![result("gpu", "node-a/demo", "demo-0")]);
        entry.boot_id = Some("boot-0".into());
        node.driver.save(UID, Some(entry.clone())).await.unwrap();
        let file = node.cdi().join(&entry.spec_files[0]);
        std::fs::remove_file(&file).unwrap();
        assert_eq!(node.driver.restore_specs().await, 0);
        assert!(!file.exists());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_spec_whose_device_is_gone_is_not_put_back() {
        let node = node(&[demo("", "")], 2);
        let entry = prepared(&node, UID, vec![result("gpu", "node-a/demo", "demo-1")]).await;
        let file = node.cdi().join(&entry.spec_files[0]);
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_file(node.root.join("dev/demo/accel1")).unwrap();
        assert_eq!(node.driver.restore_specs().await, 0);
        assert!(!file.exists());
        assert!(
            node.driver.entry(UID).is_some(),
            "left to the kubelet's next call"
        );
    }
}
