//! The DRA node service the kubelet calls to prepare and unprepare claims, served in both API
//! versions ([`crate::api::v1`], [`crate::api::v1beta1`]) by one [`NodeService`] over any
//! [`Claims`].
//!
//! Both versions' requests become [`ClaimRef`]s and go through the same
//! [`NodeService::prepare`] / [`NodeService::unprepare`]; only the message conversion is per
//! version (the `dra_plugin!` macro and the `From` impls below).
//!
//! # Answers
//!
//! Every claim in a request gets its own answer under its UID: the prepared devices, or the
//! driver's error text, which the kubelet shows in the pod's events and retries. A claim whose
//! UID is not a Kubernetes UID ([`naming::claim_uid`]), or appears more than once in one request,
//! is answered with an error and never reaches the driver: the UID becomes part of file and CDI
//! device names, and two answers for one UID cannot be told apart. Only a request with more than
//! [`MAX_CLAIMS`] claims fails as a whole (`InvalidArgument`).
//!
//! Every value of a claim an answer or a log line quotes goes through
//! [`devinject_devices::Excerpt`] (docs/security.md): the kubelet shows the answers in the
//! pod's events.
//!
//! # Concurrency
//!
//! The claims of one request are handled concurrently, at most [`MAX_IN_FLIGHT`] at once, each in
//! its own task. Concurrently, because the kubelet sends every claim of a pod in one call under
//! one deadline, and each claim costs an API server read and a file write: one after the other,
//! a pod with many claims would wait for the sum of those latencies. Bounded, because a single
//! call may name up to [`MAX_CLAIMS`] claims, and opening that many API server requests at once
//! would hurt the API server and the node more than it helps. A task per claim also turns a panic
//! in the driver into an error answer for that claim instead of a lost connection.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use devinject_devices::Excerpt;
use tokio::task::JoinSet;
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use tracing::{debug, debug_span, info_span, warn, Instrument};

use crate::api::{v1, v1beta1};
use crate::naming;
use crate::prepared::{ClaimRef, Claims, Deadline, PreparedDevice};

/// The most claims one call may name; the kubelet sends the claims of one pod.
pub const MAX_CLAIMS: usize = 1024;

/// The most claims of one call handled at the same time.
pub const MAX_IN_FLIGHT: usize = 16;

/// Why a whole call was refused (a single claim's failure is an answer, not an error).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum NodeServiceError {
    /// The call names more claims than [`MAX_CLAIMS`].
    #[error(
        "{rpc} names {count} claims, more than the {limit} one call may name; send the claims \
         in smaller calls"
    )]
    TooManyClaims {
        rpc: &'static str,
        /// How many claims the call named.
        count: usize,
        /// [`MAX_CLAIMS`].
        limit: usize,
    },
}

impl From<NodeServiceError> for Status {
    fn from(error: NodeServiceError) -> Self {
        match error {
            NodeServiceError::TooManyClaims { .. } => Status::invalid_argument(error.to_string()),
        }
    }
}

/// Each claim's answer under its UID: what the driver returned, or why it was not asked.
pub type Answers<T> = BTreeMap<String, Result<T, String>>;

/// The DRA node service over the driver `C`.
#[derive(Debug)]
pub struct NodeService<C> {
    claims: Arc<C>,
}

// Not derived: a derive would require `C: Clone`, and only the `Arc` is cloned.
impl<C> Clone for NodeService<C> {
    fn clone(&self) -> Self {
        Self {
            claims: Arc::clone(&self.claims),
        }
    }
}

impl<C: Claims> NodeService<C> {
    /// A node service that prepares and unprepares claims with `claims`.
    pub fn new(claims: Arc<C>) -> Self {
        Self { claims }
    }

    /// Both versions of the service, as routes to serve on the DRA service socket
    /// ([`devinject_kubelet::serve::serve()`]).
    pub fn routes(&self) -> Routes {
        Routes::new(v1::dra_plugin_server::DraPluginServer::new(self.clone())).add_service(
            v1beta1::dra_plugin_server::DraPluginServer::new(self.clone()),
        )
    }

    /// Prepares each of `claims` by `deadline`, answering per UID.
    pub async fn prepare(
        &self,
        claims: Vec<ClaimRef>,
        deadline: Deadline,
    ) -> Result<Answers<Vec<PreparedDevice>>, NodeServiceError> {
        let driver = Arc::clone(&self.claims);
        for_each_claim("NodePrepareResources", claims, move |claim| {
            let driver = Arc::clone(&driver);
            async move { driver.prepare(claim, deadline).await }
        })
        .await
    }

    /// Unprepares each of `claims` by `deadline`, answering per UID.
    pub async fn unprepare(
        &self,
        claims: Vec<ClaimRef>,
        deadline: Deadline,
    ) -> Result<Answers<()>, NodeServiceError> {
        let driver = Arc::clone(&self.claims);
        for_each_claim("NodeUnprepareResources", claims, move |claim| {
            let driver = Arc::clone(&driver);
            async move { driver.unprepare(claim, deadline).await }
        })
        .await
    }
}

/// Runs `op` for every claim that may reach the driver, [`MAX_IN_FLIGHT`] at a time, and
/// collects one answer per UID.
async fn for_each_claim<T, F, Fut>(
    rpc: &'static str,
    claims: Vec<ClaimRef>,
    op: F,
) -> Result<Answers<T>, NodeServiceError>
where
    T: Send + 'static,
    F: Fn(ClaimRef) -> Fut,
    Fut: Future<Output = Result<T, String>> + Send + 'static,
{
    if claims.len() > MAX_CLAIMS {
        return Err(NodeServiceError::TooManyClaims {
            rpc,
            count: claims.len(),
            limit: MAX_CLAIMS,
        });
    }
    debug!(claims = claims.len(), "called");
    let mut times: HashMap<String, usize> = HashMap::new();
    for claim in &claims {
        *times.entry(claim.uid.clone()).or_default() += 1;
    }
    let mut answers = Answers::new();
    let mut todo = Vec::with_capacity(claims.len());
    for claim in claims {
        let n = times.get(&claim.uid).copied().unwrap_or(1);
        if n > 1 {
            let error = format!(
                "claim {}/{} (uid {:?}) appears {n} times in one {rpc} call; the kubelet must \
                 name each claim once",
                Excerpt(&claim.namespace),
                Excerpt(&claim.name),
                Excerpt(&claim.uid)
            );
            answers.insert(claim.uid, Err(error));
        } else if let Err(error) = naming::claim_uid(&claim.uid) {
            let error = format!(
                "claim {}/{}: {error}",
                Excerpt(&claim.namespace),
                Excerpt(&claim.name)
            );
            answers.insert(claim.uid, Err(error));
        } else {
            todo.push(claim);
        }
    }
    for (uid, answer) in &answers {
        if let Err(error) = answer {
            warn!(uid = %Excerpt(uid), %error, "claim refused");
        }
    }

    let mut tasks = JoinSet::new();
    let mut uids = HashMap::new();
    let mut todo = todo.into_iter();
    loop {
        while tasks.len() < MAX_IN_FLIGHT {
            let Some(claim) = todo.next() else { break };
            let span = debug_span!("claim", uid = %Excerpt(&claim.uid),
                namespace = %Excerpt(&claim.namespace), name = %Excerpt(&claim.name));
            let uid = claim.uid.clone();
            let task = tasks.spawn(op(claim).instrument(span));
            uids.insert(task.id(), uid);
        }
        let Some(joined) = tasks.join_next_with_id().await else {
            break;
        };
        let (id, answer) = match joined {
            Ok((id, answer)) => (id, answer),
            Err(failure) => {
                let how = if failure.is_panic() {
                    "panicked"
                } else {
                    "was cancelled"
                };
                (failure.id(), Err(format!("{rpc}: the driver {how}")))
            }
        };
        let uid = uids.remove(&id).unwrap_or_default();
        match &answer {
            Ok(_) => debug!(uid = %Excerpt(&uid), "done"),
            Err(error) => warn!(uid = %Excerpt(&uid), %error, "claim failed"),
        }
        answers.insert(uid, answer);
    }
    Ok(answers)
}

/// The deadline of a call: its `grpc-timeout` header, as the kubelet set it.
fn call_deadline<T>(request: &Request<T>) -> Deadline {
    Deadline::of_call(
        request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok()),
    )
}

/// Implements one version's `DRAPlugin` service on [`NodeService`]: the messages differ only in
/// their module, so the conversion is written once.
macro_rules! dra_plugin {
    ($api:ident) => {
        #[tonic::async_trait]
        impl<C: Claims> $api::dra_plugin_server::DraPlugin for NodeService<C> {
            async fn node_prepare_resources(
                &self,
                request: Request<$api::NodePrepareResourcesRequest>,
            ) -> Result<Response<$api::NodePrepareResourcesResponse>, Status> {
                let deadline = call_deadline(&request);
                let claims = request.into_inner().claims;
                let span = info_span!("NodePrepareResources", version = stringify!($api));
                let claims = claims.into_iter().map(ClaimRef::from).collect();
                let answers = self.prepare(claims, deadline).instrument(span).await?;
                let claims = answers
                    .into_iter()
                    .map(|(uid, answer)| {
                        let response = match answer {
                            Ok(devices) => $api::NodePrepareResourceResponse {
                                devices: devices.into_iter().map($api::Device::from).collect(),
                                error: String::new(),
                            },
                            Err(error) => $api::NodePrepareResourceResponse {
                                devices: Vec::new(),
                                error,
                            },
                        };
                        (uid, response)
                    })
                    .collect();
                Ok(Response::new($api::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                request: Request<$api::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$api::NodeUnprepareResourcesResponse>, Status> {
                let deadline = call_deadline(&request);
                let claims = request.into_inner().claims;
                let span = info_span!("NodeUnprepareResources", version = stringify!($api));
                let claims = claims.into_iter().map(ClaimRef::from).collect();
                let answers = self.unprepare(claims, deadline).instrument(span).await?;
                let claims = answers
                    .into_iter()
                    .map(|(uid, answer)| {
                        let error = answer.err().unwrap_or_default();
                        (uid, $api::NodeUnprepareResourceResponse { error })
                    })
                    .collect();
                Ok(Response::new($api::NodeUnprepareResourcesResponse {
                    claims,
                }))
            }
        }

        impl From<$api::Claim> for ClaimRef {
            fn from(claim: $api::Claim) -> Self {
                ClaimRef {
                    namespace: claim.namespace,
                    name: claim.name,
                    uid: claim.uid,
                }
            }
        }
    };
}

dra_plugin!(v1);
dra_plugin!(v1beta1);

impl From<PreparedDevice> for v1::Device {
    fn from(device: PreparedDevice) -> Self {
        Self {
            request_names: device.request_names,
            pool_name: device.pool_name,
            device_name: device.device_name,
            cdi_device_ids: device.cdi_device_ids,
            share_id: device.share_id,
        }
    }
}

impl From<PreparedDevice> for v1beta1::Device {
    fn from(device: PreparedDevice) -> Self {
        Self {
            request_names: device.request_names,
            pool_name: device.pool_name,
            device_name: device.device_name,
            cdi_device_ids: device.cdi_device_ids,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use devinject_kubelet::serve::{connect, serve, ServedSocket};

    use super::*;

    const UID_A: &str = "0b5e6f4c-2a7d-4f1e-9c3b-1d2e3f4a5b6c";
    const UID_B: &str = "bad-8c1d-4e2f-9a3b-5c6d7e8f9a0b";

    /// A driver that records every call. Claims whose UID starts with `bad` fail, `panic`
    /// panics; the others get one device named after the UID.
    #[derive(Default)]
    struct FakeClaims {
        calls: Mutex<Vec<(&'static str, ClaimRef)>>,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
    }

    impl FakeClaims {
        fn calls(&self) -> Vec<(&'static str, ClaimRef)> {
            let mut calls = self.calls.lock().unwrap().clone();
            calls.sort();
            calls
        }

        async fn call(&self, op: &'static str, claim: &ClaimRef) -> Result<(), String> {
            self.calls.lock().unwrap().push((op, claim.clone()));
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            // Give the other claims' tasks a chance to start meanwhile.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if claim.uid.starts_with("panic") {
                panic!("fake driver panics for {}", claim.uid);
            }
            if claim.uid.starts_with("bad") {
                return Err(format!("claim {}: {op} failed in the fake", claim.name));
            }
            Ok(())
        }
    }

    impl Claims for FakeClaims {
        async fn prepare(
            &self,
            claim: ClaimRef,
            _: Deadline,
        ) -> Result<Vec<PreparedDevice>, String> {
            self.call("prepare", &claim).await?;
            Ok(vec![device(&claim.uid)])
        }

        async fn unprepare(&self, claim: ClaimRef, _: Deadline) -> Result<(), String> {
            self.call("unprepare", &claim).await
        }
    }

    fn device(uid: &str) -> PreparedDevice {
        PreparedDevice {
            request_names: vec!["gpu".into()],
            pool_name: "node-a/demo".into(),
            device_name: "demo-0".into(),
            cdi_device_ids: vec![format!("k8s.devinject.io/demo={uid}-demo-0")],
            share_id: None,
        }
    }

    fn soon() -> Deadline {
        Deadline::after(std::time::Duration::from_secs(30))
    }

    fn claim(name: &str, uid: &str) -> ClaimRef {
        ClaimRef {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    async fn start(dir: &Path) -> (Arc<FakeClaims>, ServedSocket) {
        let fake = Arc::new(FakeClaims::default());
        let service = NodeService::new(Arc::clone(&fake));
        let served = serve(&dir.join("dra.sock"), service.routes())
            .await
            .unwrap();
        (fake, served)
    }

    #[tokio::test]
    async fn v1_answers_devices_and_errors_per_claim_uid() {
        use v1::dra_plugin_client::DraPluginClient;
        let temp = tempfile::tempdir().unwrap();
        let (fake, served) = start(temp.path()).await;
        let mut client = DraPluginClient::new(connect(served.path()).await.unwrap());
        let claims = vec![
            v1::Claim {
                namespace: "ns".into(),
                uid: UID_A.into(),
                name: "good".into(),
            },
            v1::Claim {
                namespace: "ns".into(),
                uid: UID_B.into(),
                name: "broken".into(),
            },
        ];
        let response = client
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: claims.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.claims.len(), 2);
        let good = &response.claims[UID_A];
        assert_eq!(good.error, "");
        assert_eq!(
            good.devices,
            [v1::Device {
                request_names: vec!["gpu".into()],
                pool_name: "node-a/demo".into(),
                device_name: "demo-0".into(),
                cdi_device_ids: vec![format!("k8s.devinject.io/demo={UID_A}-demo-0")],
                share_id: None,
            }]
        );
        let broken = &response.claims[UID_B];
        assert!(broken.devices.is_empty());
        assert_eq!(broken.error, "claim broken: prepare failed in the fake");

        let response = client
            .node_unprepare_resources(v1::NodeUnprepareResourcesRequest { claims })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.claims[UID_A].error, "");
        assert_eq!(
            response.claims[UID_B].error,
            "claim broken: unprepare failed in the fake"
        );
        assert_eq!(
            fake.calls(),
            [
                ("prepare", claim("broken", UID_B)),
                ("prepare", claim("good", UID_A)),
                ("unprepare", claim("broken", UID_B)),
                ("unprepare", claim("good", UID_A)),
            ]
        );
        drop(client);
        served.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn v1beta1_answers_devices_and_errors_per_claim_uid() {
        use v1beta1::dra_plugin_client::DraPluginClient;
        let temp = tempfile::tempdir().unwrap();
        let (fake, served) = start(temp.path()).await;
        let mut client = DraPluginClient::new(connect(served.path()).await.unwrap());
        let claims = vec![
            v1beta1::Claim {
                namespace: "ns".into(),
                uid: UID_A.into(),
                name: "good".into(),
            },
            v1beta1::Claim {
                namespace: "ns".into(),
                uid: UID_B.into(),
                name: "broken".into(),
            },
        ];
        let response = client
            .node_prepare_resources(v1beta1::NodePrepareResourcesRequest {
                claims: claims.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            response.claims[UID_A].devices,
            [v1beta1::Device {
                request_names: vec!["gpu".into()],
                pool_name: "node-a/demo".into(),
                device_name: "demo-0".into(),
                cdi_device_ids: vec![format!("k8s.devinject.io/demo={UID_A}-demo-0")],
            }]
        );
        assert_eq!(response.claims[UID_A].error, "");
        assert_eq!(
            response.claims[UID_B].error,
            "claim broken: prepare failed in the fake"
        );

        let response = client
            .node_unprepare_resources(v1beta1::NodeUnprepareResourcesRequest {
                claims: claims[..1].to_vec(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.claims.len(), 1);
        assert_eq!(response.claims[UID_A].error, "");
        let unprepared: Vec<_> = fake
            .calls()
            .into_iter()
            .filter(|(op, _)| *op == "unprepare")
            .collect();
        assert_eq!(unprepared, [("unprepare", claim("good", UID_A))]);
        drop(client);
        served.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_repeated_or_empty_uid_gets_an_error_answer_and_never_reaches_the_driver() {
        use v1::dra_plugin_client::DraPluginClient;
        let temp = tempfile::tempdir().unwrap();
        let (fake, served) = start(temp.path()).await;
        let mut client = DraPluginClient::new(connect(served.path()).await.unwrap());
        let v1_claim = |name: &str, uid: &str| v1::Claim {
            namespace: "ns".into(),
            uid: uid.into(),
            name: name.into(),
        };
        let response = client
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: vec![
                    v1_claim("first", "dup-1"),
                    v1_claim("good", UID_A),
                    v1_claim("second", "dup-1"),
                    v1_claim("nameless", ""),
                ],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.claims.len(), 3);
        let dup = &response.claims["dup-1"];
        assert!(dup.devices.is_empty());
        assert!(dup.error.contains("appears 2 times"), "{}", dup.error);
        let empty = &response.claims[""];
        assert!(empty.devices.is_empty());
        assert!(
            empty.error.contains("ns/nameless") && empty.error.contains("not a Kubernetes UID"),
            "{}",
            empty.error
        );
        assert_eq!(response.claims[UID_A].error, "");
        assert_eq!(response.claims[UID_A].devices.len(), 1);
        assert_eq!(fake.calls(), [("prepare", claim("good", UID_A))]);

        let response = client
            .node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
                claims: vec![v1_claim("first", UID_A), v1_claim("second", UID_A)],
            })
            .await
            .unwrap()
            .into_inner();
        assert!(response.claims[UID_A].error.contains("appears 2 times"));
        assert_eq!(fake.calls().len(), 1, "unprepare reached the driver");
        drop(client);
        served.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn hostile_claim_values_are_answered_escaped_byte_for_byte() {
        let fake = Arc::new(FakeClaims::default());
        let service = NodeService::new(Arc::clone(&fake));
        let hostile = ClaimRef {
            namespace: "ns\u{9b}2J".into(),
            name: "a\u{202e}b\u{1b}[0m".into(),
            uid: "u\u{85}\n".into(),
        };
        let answers = service
            .prepare(vec![hostile.clone(), hostile.clone()], soon())
            .await
            .unwrap();
        assert_eq!(
            answers["u\u{85}\n"],
            Err(
                "claim ns\\u{9b}2J/a\\u{202e}b\\u{1b}[0m (uid \"u\\u{85}\\n\") appears 2 times \
                 in one NodePrepareResources call; the kubelet must name each claim once"
                    .to_owned()
            )
        );
        let answers = service.unprepare(vec![hostile], soon()).await.unwrap();
        assert_eq!(
            answers["u\u{85}\n"],
            Err(
                "claim ns\\u{9b}2J/a\\u{202e}b\\u{1b}[0m: claim uid \"u\\u{85}\\n\" is not a \
                 Kubernetes UID (letters, digits and '-', at most 64)"
                    .to_owned()
            )
        );
        assert!(fake.calls().is_empty());
    }

    #[tokio::test]
    async fn more_claims_than_the_limit_are_refused_as_invalid_argument() {
        use v1beta1::dra_plugin_client::DraPluginClient;
        let temp = tempfile::tempdir().unwrap();
        let (fake, served) = start(temp.path()).await;
        let mut client = DraPluginClient::new(connect(served.path()).await.unwrap());
        let claims = (0..=MAX_CLAIMS)
            .map(|i| v1beta1::Claim {
                namespace: "ns".into(),
                uid: format!("uid-{i}"),
                name: format!("c{i}"),
            })
            .collect();
        let status = client
            .node_prepare_resources(v1beta1::NodePrepareResourcesRequest { claims })
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("1025 claims"), "{status}");
        assert!(status.message().contains("1024"), "{status}");
        assert!(fake.calls().is_empty());
        drop(client);
        served.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn at_most_max_in_flight_claims_are_prepared_at_once() {
        let fake = Arc::new(FakeClaims::default());
        let service = NodeService::new(Arc::clone(&fake));
        let claims: Vec<_> = (0..MAX_IN_FLIGHT * 3)
            .map(|i| claim(&format!("c{i}"), &format!("uid-{i}")))
            .collect();
        let answers = service.prepare(claims, soon()).await.unwrap();
        assert_eq!(answers.len(), MAX_IN_FLIGHT * 3);
        assert!(answers.values().all(Result::is_ok));
        assert_eq!(fake.calls().len(), MAX_IN_FLIGHT * 3);
        // The fake yields while "working", so every started claim overlaps the others: the
        // most at once is the bound itself.
        assert_eq!(fake.most_in_flight.load(Ordering::SeqCst), MAX_IN_FLIGHT);
    }

    #[tokio::test]
    async fn a_panicking_driver_is_an_error_answer_for_its_claim_only() {
        let fake = Arc::new(FakeClaims::default());
        let service = NodeService::new(Arc::clone(&fake));
        let answers = service
            .prepare(vec![claim("boom", "panic-1"), claim("good", UID_A)], soon())
            .await
            .unwrap();
        assert_eq!(
            answers["panic-1"],
            Err("NodePrepareResources: the driver panicked".to_owned())
        );
        assert_eq!(answers[UID_A], Ok(vec![device(UID_A)]));
    }
}
