//! A test kubelet that serves the real pod-resources v1 API (`v1.PodResourcesLister`, from
//! devinject's own proto) on a Unix socket, answering from a fixed list of pods.
//!
//! It behaves like the kubelet where the hook can tell the difference: `Get` of an unknown pod
//! fails with `Unknown`, `Get` can be switched off as with the `KubeletPodResourcesGet` gate,
//! calls can be rate-limited with `RESOURCE_EXHAUSTED` or refused outright, and a call can be
//! answered late or left unanswered. The
//! socket is bound before [`FakeKubelet::start`] returns, so clients never race its startup.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{Context, Result};
use devinject_kubelet::pod_resources::v1::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use devinject_kubelet::pod_resources::v1::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, GetPodResourcesRequest,
    GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};
use tonic::{Request, Response, Status};

pub use devinject_kubelet::pod_resources::testing::{pod, Grants};

#[derive(Debug, Default)]
struct State {
    pods: Vec<PodResources>,
    get_disabled: bool,
    rate_limited: u32,
    failing: bool,
    stall: bool,
    delay: std::time::Duration,
    calls: Vec<&'static str>,
}

#[derive(Clone)]
struct Service {
    state: Arc<Mutex<State>>,
    release: Arc<tokio::sync::Notify>,
}

impl Service {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the call and applies rate limiting and stalling.
    async fn enter(&self, rpc: &'static str) -> Result<(), Status> {
        let (stall, delay) = {
            let mut s = self.state();
            s.calls.push(rpc);
            if s.rate_limited > 0 {
                s.rate_limited -= 1;
                return Err(Status::resource_exhausted("rejected by rate limit"));
            }
            if s.failing {
                return Err(Status::internal("test kubelet failure"));
            }
            (s.stall, s.delay)
        };
        if stall {
            self.release.notified().await;
            return Err(Status::unavailable("test kubelet stopped"));
        }
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.enter("List").await?;
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: self.state().pods.clone(),
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        self.enter("GetAllocatableResources").await?;
        Ok(Response::new(AllocatableResourcesResponse::default()))
    }

    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        self.enter("Get").await?;
        let r = request.into_inner();
        let s = self.state();
        if s.get_disabled {
            // What the kubelet answers with the KubeletPodResourcesGet gate off.
            return Err(Status::unknown("PodResources API Get method disabled"));
        }
        let found = s
            .pods
            .iter()
            .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
            .cloned()
            .ok_or_else(|| {
                Status::unknown(format!(
                    "pod {} in namespace {} not found",
                    r.pod_name, r.pod_namespace
                ))
            })?;
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(found),
        }))
    }
}

/// A running test kubelet; dropping it stops the server and removes nothing else.
pub struct FakeKubelet {
    socket: PathBuf,
    service: Service,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKubelet")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl FakeKubelet {
    /// Serves `pods` on a new socket at `socket` (its directory must exist).
    pub fn start(socket: &Path, pods: Vec<PodResources>) -> Result<Self> {
        let listener = std::os::unix::net::UnixListener::bind(socket)
            .with_context(|| format!("bind {}", socket.display()))?;
        listener.set_nonblocking(true)?;
        let service = Service {
            state: Arc::new(Mutex::new(State {
                pods,
                ..State::default()
            })),
            release: Arc::new(tokio::sync::Notify::new()),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = service.clone();
        let thread = std::thread::Builder::new()
            .name("fake-kubelet".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("test kubelet runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::UnixListener::from_std(listener).expect("tokio listener");
                    tonic::transport::Server::builder()
                        .add_service(PodResourcesListerServer::new(server))
                        .serve_with_incoming_shutdown(
                            tokio_stream::wrappers::UnixListenerStream::new(listener),
                            async {
                                let _ = rx.await;
                            },
                        )
                        .await
                        .expect("test kubelet serves");
                });
            })?;
        Ok(Self {
            socket: socket.to_owned(),
            service,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The socket it serves on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Answers `Get` as a kubelet with the `KubeletPodResourcesGet` gate off does.
    pub fn disable_get(&self) -> &Self {
        self.service.state().get_disabled = true;
        self
    }

    /// Refuses the next `n` calls with `RESOURCE_EXHAUSTED`, as the kubelet's rate limiter does.
    pub fn rate_limit_next(&self, n: u32) -> &Self {
        self.service.state().rate_limited = n;
        self
    }

    /// Answers every later call with `INTERNAL`, "test kubelet failure".
    pub fn fail(&self) -> &Self {
        self.service.state().failing = true;
        self
    }

    /// Leaves every later call unanswered until the kubelet is dropped.
    pub fn stall(&self) -> &Self {
        self.service.state().stall = true;
        self
    }

    /// Answers every later call only after `delay`, as a kubelet busy elsewhere does.
    pub fn delay(&self, delay: std::time::Duration) -> &Self {
        self.service.state().delay = delay;
        self
    }

    /// The RPCs called so far, in order (`Get`, `List`, ...).
    pub fn calls(&self) -> Vec<&'static str> {
        self.service.state().calls.clone()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.service.release.notify_waiters();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}
