//! Device metadata for the containers (KEP-5304, `k8s.io/dynamic-resource-allocation/api/metadata`):
//! what each request of a claim was allocated, with the devices' attributes as the slice
//! publishes them, in a file the claim's CDI spec mounts read-only into every container that
//! uses the request.
//!
//! # Layout
//! - In the container, at the path Kubernetes' metadata API defines: for a claim made from a
//!   template, `/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/<pod claim
//!   name>/<request>/<driver>-metadata.json` (the pod-local name from the claim's
//!   `resource.kubernetes.io/pod-claim-name` annotation, which the pod's author knows in
//!   advance); for a claim the pod names directly, `.../resourceclaims/<claim name>/<request>/...`.
//! - The file is a `metadata.resource.k8s.io/v1beta1` `DeviceMetadata`: the claim's name,
//!   namespace, UID and generation, the pod claim name, and one request (the base request
//!   name: a subrequest `gpu/large` is request `gpu`) with its devices (driver, pool, name,
//!   attributes).
//! - On the host, one file per claim and request in the driver's own directory below the
//!   kubelet's plugins directory: `metadata/<claim uid>_<request>.json`, written before the
//!   claim's spec names it and removed with the claim.
//!
//! Every name that reaches a path is checked first: the claim's UID ([`naming::claim_uid`]),
//! and its name, the pod claim name and the request as object names ([`naming::object_name`]), so no value of a claim can
//! climb out of the directory or name another claim's file.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::DeviceAttribute;
use serde_json::{json, Value};

use crate::naming::{self, NamingError};

/// Where Kubernetes' metadata API puts the files in a container.
pub const CONTAINER_DIR: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// The metadata object's API version.
pub const API_VERSION: &str = "metadata.resource.k8s.io/v1beta1";
/// The annotation the ResourceClaim controller sets on a claim made from a template: the
/// pod's name for it (`pod.spec.resourceClaims[].name`).
pub const POD_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";
/// The host directory's name, below the driver's directory.
pub const HOST_DIR: &str = "metadata";

/// Why a claim's metadata cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The claim's UID, or a name of the claim that names a path, is not one.
    #[error(transparent)]
    Naming(#[from] NamingError),
}

/// One device of a request, as the metadata lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataDevice {
    /// The device's pool.
    pub pool: String,
    /// Its DRA name.
    pub name: String,
    /// Its attributes, as the slice publishes them.
    pub attributes: BTreeMap<String, DeviceAttribute>,
}

/// The claim as the metadata names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct MetadataClaim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// The pod's name for it, for a claim made from a template.
    pub pod_claim: Option<String>,
}

/// One request's metadata file: where it goes on the host and in the container, and what it
/// says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataFile {
    /// Its file name in the host directory ([`HOST_DIR`]).
    pub file_name: String,
    /// Where the claim's spec mounts it in the container.
    pub container_path: String,
    /// The JSON document.
    pub contents: String,
}

/// The base request of `request`: a subrequest `gpu/large` belongs to request `gpu`.
pub fn base_request(request: &str) -> &str {
    request.split_once('/').map_or(request, |(base, _)| base)
}

/// The metadata file of `request` (a base request) of `claim`, naming `devices` of `driver`.
pub fn file(
    driver: &str,
    claim: &MetadataClaim,
    request: &str,
    devices: &[MetadataDevice],
) -> Result<MetadataFile, MetadataError> {
    let uid = naming::claim_uid(&claim.uid)?;
    naming::object_name("request", request)?;
    naming::object_name("name", &claim.name)?;
    let container_path = match &claim.pod_claim {
        Some(pod_claim) => {
            naming::object_name("pod claim name", pod_claim)?;
            format!("{CONTAINER_DIR}/resourceclaimtemplates/{pod_claim}/{request}/{driver}-metadata.json")
        }
        None => format!(
            "{CONTAINER_DIR}/resourceclaims/{}/{request}/{driver}-metadata.json",
            claim.name
        ),
    };
    let devices: Vec<Value> = devices
        .iter()
        .map(|d| {
            json!({
                "driver": driver,
                "pool": d.pool,
                "name": d.name,
                "attributes": d.attributes,
            })
        })
        .collect();
    let mut document = json!({
        "apiVersion": API_VERSION,
        "kind": "DeviceMetadata",
        "metadata": {
            "name": claim.name,
            "namespace": claim.namespace,
            "uid": claim.uid,
            "generation": claim.generation,
        },
        "requests": [{ "name": request, "devices": devices }],
    });
    if let Some(pod_claim) = &claim.pod_claim {
        document["podClaimName"] = json!(pod_claim);
    }
    Ok(MetadataFile {
        file_name: format!("{uid}_{request}.json"),
        container_path,
        contents: format!("{document}\n"),
    })
}

/// Whether `file_name` in the host directory is one of claim `uid`'s files.
pub fn is_claims(file_name: &str, uid: &str) -> bool {
    file_name
        .strip_prefix(uid)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|rest| rest.ends_with(".json") && !rest.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c";

    fn claim(pod_claim: Option<&str>) -> MetadataClaim {
        MetadataClaim {
            namespace: "ns".into(),
            name: "pod-gpu-x7k2p".into(),
            uid: UID.into(),
            generation: 1,
            pod_claim: pod_claim.map(str::to_owned),
        }
    }

    fn device() -> MetadataDevice {
        MetadataDevice {
            pool: "node-a/demo".into(),
            name: "demo-0".into(),
            attributes: BTreeMap::from([(
                "id".to_owned(),
                DeviceAttribute {
                    string: Some("0".into()),
                    ..DeviceAttribute::default()
                },
            )]),
        }
    }

    #[test]
    fn a_template_claims_file_is_found_by_the_pods_name_for_it() {
        let f = file("devinject.io", &claim(Some("gpu")), "dev", &[device()]).unwrap();
        assert_eq!(
            f.container_path,
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/dev/devinject.io-metadata.json"
        );
        assert_eq!(f.file_name, format!("{UID}_dev.json"));
        let doc: Value = serde_json::from_str(&f.contents).unwrap();
        assert_eq!(doc["apiVersion"], API_VERSION);
        assert_eq!(doc["kind"], "DeviceMetadata");
        assert_eq!(doc["metadata"]["uid"], UID);
        assert_eq!(doc["podClaimName"], "gpu");
        assert_eq!(doc["requests"][0]["name"], "dev");
        let d = &doc["requests"][0]["devices"][0];
        assert_eq!(
            (&d["driver"], &d["pool"], &d["name"]),
            (
                &json!("devinject.io"),
                &json!("node-a/demo"),
                &json!("demo-0")
            )
        );
        assert_eq!(d["attributes"]["id"], json!({"string": "0"}));
        assert!(is_claims(&f.file_name, UID));
        assert!(!is_claims(&f.file_name, "0b5e6f4c"));
    }

    #[test]
    fn a_claim_named_by_the_pod_is_found_by_its_own_name() {
        let f = file("devinject.io", &claim(None), "dev", &[]).unwrap();
        assert_eq!(
            f.container_path,
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/pod-gpu-x7k2p/dev/devinject.io-metadata.json"
        );
        let doc: Value = serde_json::from_str(&f.contents).unwrap();
        assert!(doc.get("podClaimName").is_none());
        assert_eq!(base_request("gpu/large"), "gpu");
        assert_eq!(base_request("gpu"), "gpu");
    }

    #[test]
    fn a_value_that_would_leave_the_directory_is_refused_escaped() {
        for (pod_claim, request) in [
            (Some("../../etc"), "dev"),
            (Some("a/b"), "dev"),
            (Some(".."), "dev"),
            (Some("gpu"), ".."),
            (Some("gpu"), "x\n/y"),
            (Some(""), "dev"),
        ] {
            let err = file("devinject.io", &claim(pod_claim), request, &[])
                .unwrap_err()
                .to_string();
            assert!(err.contains("is not a Kubernetes object name"), "{err}");
            assert!(!err.contains('\n'), "escaped: {err}");
        }
        let mut bad = claim(None);
        bad.uid = "../x".into();
        assert!(file("devinject.io", &bad, "dev", &[]).is_err());
    }
}
