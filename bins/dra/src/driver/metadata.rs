//! A claim's device metadata files (KEP-5304, device metadata for containers): one file per
//! request, naming the claim and the attributes of each of the request's devices, mounted by the
//! spec on the request's first device; written into the driver's metadata directory for this
//! boot only, as the specs are, and removed by the claim's UID, only regular files named for it.

use std::collections::BTreeMap;
use std::ffi::OsStr;

use devinject_hostfs::host_dir::HostDir;
use k8s_openapi::api::resource::v1::ResourceClaim;
use tracing::warn;

use super::Driver;
use crate::checkpoint::MetadataMount;
use crate::claim_spec;
use crate::device_metadata::{self, MetadataClaim, MetadataDevice, MetadataFile};

impl Driver {
    /// The device metadata file of each of the claim's requests (`requests`, by base request
    /// name), and where its spec mounts it: on the request's first device.
    pub(super) fn metadata(
        &self,
        object: &ResourceClaim,
        requests: BTreeMap<String, Vec<MetadataDevice>>,
    ) -> Result<Vec<(MetadataFile, MetadataMount)>, String> {
        let meta = &object.metadata;
        let claim = MetadataClaim {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
            pod_claim: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(device_metadata::POD_CLAIM_ANNOTATION))
                .cloned(),
        };
        let mut out = Vec::with_capacity(requests.len());
        for (request, devices) in requests {
            let Some(first) = devices.first() else {
                continue;
            };
            let device = first.name.clone();
            let file = device_metadata::file(&self.config.spec.driver, &claim, &request, &devices)
                .map_err(|e| e.to_string())?;
            let mount = MetadataMount {
                device,
                file: file.file_name.clone(),
                container_path: file.container_path.clone(),
            };
            out.push((file, mount));
        }
        Ok(out)
    }

    /// Writes device metadata `files` into the metadata directory, made when missing.
    pub(super) fn write_metadata(&self, files: &[MetadataFile]) -> Result<(), String> {
        if files.is_empty() {
            return Ok(());
        }
        let (dir, _) = HostDir::create(&self.config.spec.root, &self.config.metadata_dir)
            .map_err(|e| format!("the device metadata directory: {e}"))?;
        for f in files {
            // Valid for this boot only, as the claim's spec is.
            dir.write_for_this_boot(
                OsStr::new(&f.file_name),
                f.contents.as_bytes(),
                Some(claim_spec::SPEC_FILE_MODE),
            )
            .map_err(|e| format!("device metadata: {e}"))?;
        }
        Ok(())
    }

    /// Removes claim `uid`'s device metadata files; returns how many went. Only regular files
    /// named for the claim are removed; what cannot be is logged.
    pub(super) fn remove_metadata(&self, uid: &str) -> usize {
        let dir = match HostDir::open(&self.config.spec.root, &self.config.metadata_dir) {
            Ok(Some(dir)) => dir,
            Ok(None) => return 0,
            Err(e) => {
                warn!(error = %e, "cannot open the device metadata directory to remove a claim's files");
                return 0;
            }
        };
        let names: Vec<String> = match std::fs::read_dir(dir.path()) {
            Ok(entries) => entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| device_metadata::is_claims(name, uid))
                .collect(),
            Err(e) => {
                warn!(dir = %dir.path().display(), error = %e, "cannot list the device metadata directory");
                return 0;
            }
        };
        let mut removed = 0;
        for name in names {
            match dir.remove(OsStr::new(&name)) {
                Ok(true) => removed += 1,
                Ok(false) => {}
                Err(e) => {
                    warn!(file = %name, error = %e, "cannot remove a claim's device metadata file")
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::fixtures::{claim_object, demo, node, result, OTHER_UID, UID};

    fn device(name: &str) -> MetadataDevice {
        MetadataDevice {
            pool: "node-a/demo".into(),
            name: name.into(),
            attributes: BTreeMap::new(),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_request_gets_one_file_mounted_on_its_first_device() {
        let node = node(&[demo("", "")], 1);
        let mut object = claim_object(UID, vec![result("a", "node-a/demo", "demo-0")], None);
        object.metadata.annotations = Some(
            [(
                device_metadata::POD_CLAIM_ANNOTATION.to_owned(),
                "gpus".to_owned(),
            )]
            .into(),
        );
        let requests = BTreeMap::from([
            ("a".to_owned(), vec![device("demo-1"), device("demo-0")]),
            ("b".to_owned(), vec![device("demo-2")]),
            ("none".to_owned(), Vec::new()),
        ]);
        let out = node.driver.metadata(&object, requests).unwrap();
        let mounts: Vec<(&str, &str)> = out
            .iter()
            .map(|(_, m)| (m.device.as_str(), m.file.as_str()))
            .collect();
        let (a, b) = (format!("{UID}_a.json"), format!("{UID}_b.json"));
        assert_eq!(mounts, [("demo-1", a.as_str()), ("demo-2", b.as_str())]);
        for (file, mount) in &out {
            assert_eq!(file.file_name, mount.file);
            assert_eq!(file.container_path, mount.container_path);
        }
        let document: serde_json::Value = serde_json::from_str(&out[0].0.contents).unwrap();
        assert_eq!(document["podClaimName"], "gpus");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn no_file_to_write_makes_no_directory() {
        let node = node(&[demo("", "")], 1);
        node.driver.write_metadata(&[]).unwrap();
        assert!(!node.metadata_dir().exists());
        assert_eq!(
            node.driver.remove_metadata(UID),
            0,
            "no directory: nothing to remove"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claims_files_are_removed_and_only_its_own() {
        let node = node(&[demo("", "")], 1);
        let file = |name: String| MetadataFile {
            file_name: name,
            container_path: "/var/run/x".into(),
            contents: "{}\n".into(),
        };
        node.driver
            .write_metadata(&[
                file(format!("{UID}_a.json")),
                file(format!("{UID}_b.json")),
                file(format!("{OTHER_UID}_a.json")),
                file(format!("{UID}_a.txt")),
            ])
            .unwrap();
        let dir = node.metadata_dir();
        assert!(dir.join(format!("{UID}_a.json")).is_file());
        assert_eq!(node.driver.remove_metadata(UID), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [format!("{UID}_a.txt"), format!("{OTHER_UID}_a.json")]
        );
    }
}
