//! A CRI client for tests: the kubelet's side of the Container Runtime Interface (`runtime.v1`,
//! from the `k8s-cri` crate), over a unix socket, behind a blocking facade.
//!
//! [`Cri`] remembers the pod sandboxes it ran and stops and removes them when dropped, also when
//! a test fails; drop it before the containerd it talks to.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerEventResponse, ContainerEventType, ContainerMetadata, ContainerState,
    ContainerStatus, ContainerStatusRequest, CreateContainerRequest, Device, GetEventsRequest,
    Image, ImageSpec, ImageStatusRequest, Int64Value, KeyValue, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, PullImageRequest,
    RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest,
    StopPodSandboxRequest, VersionRequest, VersionResponse,
};
use tokio::net::UnixStream;
use tokio::sync::mpsc::UnboundedReceiver;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::daemons::{poll, CLI_DEADLINE, START_DEADLINE};

/// A connection to a CRI runtime.
pub struct Cri {
    rt: tokio::runtime::Runtime,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    pods: Vec<String>,
    /// The runtime's container events, once [`Cri::follow_events`] has asked for them.
    events: Option<Events>,
}

/// The container events followed, and the stops read while waiting for another container's.
#[derive(Debug)]
struct Events {
    rx: UnboundedReceiver<std::result::Result<ContainerEventResponse, tonic::Status>>,
    stopped: HashSet<String>,
}

impl std::fmt::Debug for Cri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cri").field("pods", &self.pods).finish()
    }
}

impl Cri {
    /// Connects to the CRI socket `socket` (containerd's gRPC socket).
    pub fn connect(socket: &Path) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("build a tokio runtime")?;
        let path = socket.to_owned();
        let channel = rt.block_on(async move {
            // The URI is required by tonic but unused: the connector dials the socket.
            Endpoint::try_from("http://[::]:50051")?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                    }
                }))
                .await
        });
        let channel =
            channel.with_context(|| format!("connect to the CRI socket {}", socket.display()))?;
        Ok(Self {
            rt,
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
            pods: Vec::new(),
            events: None,
        })
    }

    /// Runs one call with a deadline.
    fn call<T, F>(&self, what: &str, f: F) -> Result<T>
    where
        F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        // The timer must be made inside the runtime.
        match self
            .rt
            .block_on(async { tokio::time::timeout(CLI_DEADLINE, f).await })
        {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => bail!("CRI {what}: {}: {}", status.code(), status.message()),
            Err(_) => bail!("CRI {what} did not answer within {CLI_DEADLINE:?}"),
        }
    }

    pub fn version(&mut self) -> Result<VersionResponse> {
        let mut c = self.runtime.clone();
        self.call("Version", async move {
            c.version(VersionRequest {
                version: "v1".into(),
            })
            .await
        })
    }

    /// Waits until the runtime answers `Version` (the CRI plugin starts after containerd's
    /// socket is up).
    pub fn wait_ready(&mut self) -> Result<VersionResponse> {
        poll("the CRI service to answer Version", START_DEADLINE, || {
            Ok(self.version().ok())
        })
    }

    /// `ImageStatus` of `image`: what the runtime's store holds under that name, if anything.
    pub fn image(&mut self, image: &str) -> Result<Option<Image>> {
        let mut c = self.images.clone();
        let req = ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            verbose: false,
        };
        Ok(self
            .call("ImageStatus", async move { c.image_status(req).await })?
            .image)
    }

    /// Waits until the runtime knows the image `image` (an import is seen through events).
    pub fn wait_image(&mut self, image: &str) -> Result<()> {
        poll(
            &format!("the CRI image store to list {image}"),
            START_DEADLINE,
            || Ok(self.image(image)?.map(drop)),
        )
    }

    /// `PullImage` of `image`, as the kubelet asks for it (no credentials, no pod); returns the
    /// image reference the runtime answers with.
    pub fn pull_image(&mut self, image: &str) -> Result<String> {
        let mut c = self.images.clone();
        let req = PullImageRequest {
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(self
            .call("PullImage", async move { c.pull_image(req).await })?
            .image_ref)
    }

    /// `RunPodSandbox` with `handler` (the RuntimeClass handler, e.g. `devinject`); the pod is
    /// stopped and removed when `self` is dropped.
    pub fn run_pod_sandbox(&mut self, config: &PodSandboxConfig, handler: &str) -> Result<String> {
        let mut c = self.runtime.clone();
        let req = RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.into(),
        };
        let id = self
            .call("RunPodSandbox", async move { c.run_pod_sandbox(req).await })?
            .pod_sandbox_id;
        self.pods.push(id.clone());
        Ok(id)
    }

    /// `CreateContainer` in pod `pod`.
    pub fn create_container(
        &mut self,
        pod: &str,
        config: &ContainerConfig,
        sandbox: &PodSandboxConfig,
    ) -> Result<String> {
        let mut c = self.runtime.clone();
        let req = CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(config.clone()),
            sandbox_config: Some(sandbox.clone()),
        };
        Ok(self
            .call(
                "CreateContainer",
                async move { c.create_container(req).await },
            )?
            .container_id)
    }

    /// `StartContainer`.
    pub fn start_container(&mut self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = StartContainerRequest {
            container_id: id.into(),
        };
        self.call(
            "StartContainer",
            async move { c.start_container(req).await },
        )
        .map(drop)
    }

    /// `ContainerStatus`.
    pub fn container_status(&mut self, id: &str) -> Result<ContainerStatus> {
        let mut c = self.runtime.clone();
        let req = ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        self.call(
            "ContainerStatus",
            async move { c.container_status(req).await },
        )?
        .status
        .context("ContainerStatus without a status")
    }

    /// Subscribes to the runtime's container events (`GetContainerEvents`, containerd 1.7 and
    /// later), which [`Cri::wait_exited`] then waits on instead of polling: the exit is seen when
    /// the runtime reports it, not at the next poll (20, 40, 80 ms apart), which timings need.
    /// The runtime hands each event to one subscriber: one follower per runtime.
    ///
    /// containerd answers the call only with its first event, so the stream is read by a task
    /// of this client's runtime (driven whenever a call is), which passes the events on.
    pub fn follow_events(&mut self) -> Result<()> {
        let mut c = self.runtime.clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.rt.spawn(async move {
            let mut stream = match c.get_container_events(GetEventsRequest {}).await {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    let _ = tx.send(Err(status));
                    return;
                }
            };
            loop {
                let event = stream.message().await.transpose();
                let end = !matches!(event, Some(Ok(_)));
                if tx
                    .send(event.unwrap_or_else(|| Err(tonic::Status::cancelled("stream ended"))))
                    .is_err()
                    || end
                {
                    return;
                }
            }
        });
        // Let the task send its request before the caller's next call.
        self.rt.block_on(tokio::task::yield_now());
        self.events = Some(Events {
            rx,
            stopped: HashSet::new(),
        });
        Ok(())
    }

    /// Waits until the container `id` has exited: on its stop event when following events (the
    /// stops of other containers read on the way are kept for their own wait), otherwise by
    /// polling `ContainerStatus`.
    pub fn wait_exited(&mut self, id: &str, deadline: Duration) -> Result<ContainerStatus> {
        if self.events.is_some() {
            self.wait_stop_event(id, deadline)?;
            let s = self.container_status(id)?;
            if s.state != ContainerState::ContainerExited as i32 {
                bail!(
                    "container {id} reported stopped but its state is {}",
                    s.state
                );
            }
            return Ok(s);
        }
        poll(&format!("container {id} to exit"), deadline, || {
            let s = self.container_status(id)?;
            Ok((s.state == ContainerState::ContainerExited as i32).then_some(s))
        })
    }

    /// Reads container events until the stop event of `id`, or finds it among those read before.
    fn wait_stop_event(&mut self, id: &str, deadline: Duration) -> Result<()> {
        let Some(events) = self.events.as_mut() else {
            bail!("not following container events");
        };
        if events.stopped.remove(id) {
            return Ok(());
        }
        let stopped = ContainerEventType::ContainerStoppedEvent as i32;
        self.rt.block_on(async {
            tokio::time::timeout(deadline, async {
                loop {
                    match events.rx.recv().await {
                        Some(Ok(e)) if e.container_event_type == stopped => {
                            if e.container_id == id {
                                return Ok(());
                            }
                            events.stopped.insert(e.container_id);
                        }
                        Some(Ok(_)) => {}
                        Some(Err(s)) => {
                            bail!("CRI GetContainerEvents: {}: {}", s.code(), s.message())
                        }
                        None => bail!("the container events ended"),
                    }
                }
            })
            .await
            .unwrap_or_else(|_| {
                bail!("timed out after {deadline:?} waiting for container {id} to exit")
            })
        })
    }

    /// `RemoveContainer`.
    pub fn remove_container(&mut self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let req = RemoveContainerRequest {
            container_id: id.into(),
        };
        self.call(
            "RemoveContainer",
            async move { c.remove_container(req).await },
        )
        .map(drop)
    }

    /// `StopPodSandbox` then `RemovePodSandbox`.
    pub fn remove_pod(&mut self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        let stop = StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call(
            "StopPodSandbox",
            async move { c.stop_pod_sandbox(stop).await },
        )?;
        let mut c = self.runtime.clone();
        let remove = RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.call("RemovePodSandbox", async move {
            c.remove_pod_sandbox(remove).await
        })?;
        self.pods.retain(|p| p != id);
        Ok(())
    }
}

impl Drop for Cri {
    fn drop(&mut self) {
        for id in self.pods.clone() {
            if let Err(e) = self.remove_pod(&id) {
                eprintln!("warning: cannot remove pod sandbox {id}: {e:#}");
            }
        }
    }
}

/// A cgroup parent for a test's pods or containers (`/<name>` in every hierarchy), removed with
/// what the engine left below it (podman's `conmon` group) when dropped. Without one, containerd
/// puts pods under `/k8s.io` and podman under `/libpod_parent`, which outlive the test.
#[derive(Debug)]
pub struct CgroupParent {
    name: String,
}

impl CgroupParent {
    /// The parent `/<name>`; `name` must be unique to the test (e.g. its temp dir's name).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
        }
    }

    /// The value for `LinuxPodSandboxConfig.cgroup_parent`.
    pub fn path(&self) -> String {
        format!("/{}", self.name)
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        let base = Path::new("/sys/fs/cgroup");
        let mut dirs = vec![base.join(&self.name)];
        if let Ok(entries) = std::fs::read_dir(base) {
            dirs.extend(entries.flatten().map(|e| e.path().join(&self.name)));
        }
        for d in dirs.iter().filter(|d| d.is_dir()) {
            remove_cgroup(d);
        }
    }
}

/// Removes the (empty) cgroup `dir` and the groups below it, deepest first.
fn remove_cgroup(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&e.path());
            }
        }
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        eprintln!("warning: cannot remove cgroup {}: {e}", dir.display());
    }
}

/// A pod sandbox in the node's network namespace (no CNI), logging to `log_dir`, with its
/// cgroups below `cgroup_parent`, like a `hostNetwork: true` pod.
pub fn host_network_pod(
    name: &str,
    uid: &str,
    log_dir: &Path,
    cgroup_parent: &CgroupParent,
) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: log_dir.display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.path(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(host_network_namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs a host-network pod `name` ([`host_network_pod`]) with runtime `handler` (`""`: the
/// default), logging below `root/logs/<name>`, its cgroups below `cgroups`.
pub fn run_pod(
    cri: &mut Cri,
    root: &Path,
    cgroups: &CgroupParent,
    name: &str,
    handler: &str,
) -> Result<(String, PodSandboxConfig)> {
    let log_dir = root.join("logs").join(name);
    std::fs::create_dir_all(&log_dir)?;
    let config = host_network_pod(name, &format!("uid-{name}"), &log_dir, cgroups);
    let id = cri.run_pod_sandbox(&config, handler)?;
    Ok((id, config))
}

/// Creates `spec` in `pod`, starts it and waits for its end: its exit code and output. A
/// creation that fails is `Ok(Err(message))`.
pub fn run_to_exit(
    cri: &mut Cri,
    pod: &str,
    pod_config: &PodSandboxConfig,
    spec: &ContainerSpec,
) -> Result<std::result::Result<(i32, String), String>> {
    let id = match cri.create_container(pod, &spec.config(), pod_config) {
        Ok(id) => id,
        Err(e) => return Ok(Err(format!("{e:#}"))),
    };
    cri.start_container(&id)?;
    let status = cri.wait_exited(&id, Duration::from_secs(60))?;
    let log = Path::new(&pod_config.log_directory).join(&spec.log_path);
    let output = read_log(&log)?;
    cri.remove_container(&id)?;
    if status.exit_code != 0 && output.is_empty() {
        bail!(
            "{} exited {}: {}",
            spec.name,
            status.exit_code,
            status.message
        );
    }
    Ok(Ok((status.exit_code, output)))
}

/// The namespaces of a `hostNetwork: true` pod and its containers: the node's network, a PID
/// namespace per container, the pod's IPC.
fn host_network_namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// What a test container runs and is given.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// Its name in the pod.
    pub name: String,
    /// The image reference.
    pub image: String,
    /// The command (replacing the image's entrypoint).
    pub command: Vec<String>,
    /// `KEY=value` pairs.
    pub env: Vec<(String, String)>,
    pub annotations: HashMap<String, String>,
    /// Bind mounts `(host path, container path)`.
    pub mounts: Vec<(PathBuf, PathBuf)>,
    /// Log file, relative to the pod's log directory.
    pub log_path: String,
    /// Device nodes passed natively `(host path, container path)`, as the kubelet passes a
    /// device plugin's `DeviceSpec`s.
    pub devices: Vec<(PathBuf, PathBuf)>,
    /// The user and group it runs as (`runAsUser`, `runAsGroup`), with no supplementary
    /// groups; the image's default when `None`.
    pub user: Option<(i64, i64)>,
}

impl ContainerSpec {
    /// The CRI container config.
    pub fn config(&self) -> ContainerConfig {
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: self.name.clone(),
                attempt: 0,
            }),
            // As the kubelet sends it since 1.29: CRI-O verifies the signature policy of the
            // image the user named, and refuses a request without it.
            image: Some(ImageSpec {
                image: self.image.clone(),
                user_specified_image: self.image.clone(),
                ..Default::default()
            }),
            command: self.command.clone(),
            envs: self
                .env
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            annotations: self.annotations.clone(),
            mounts: self
                .mounts
                .iter()
                .map(|(h, c)| Mount {
                    host_path: h.display().to_string(),
                    container_path: c.display().to_string(),
                    ..Default::default()
                })
                .collect(),
            devices: self
                .devices
                .iter()
                .map(|(h, c)| Device {
                    host_path: h.display().to_string(),
                    container_path: c.display().to_string(),
                    permissions: "rwm".into(),
                })
                .collect(),
            log_path: self.log_path.clone(),
            // The pod's namespaces, as the kubelet repeats them for each container (CRI-O
            // refuses a container whose PID namespace differs from its sandbox's).
            linux: Some(LinuxContainerConfig {
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(host_network_namespaces()),
                    run_as_user: self.user.map(|(uid, _)| Int64Value { value: uid }),
                    run_as_group: self.user.map(|(_, gid)| Int64Value { value: gid }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// The text a container wrote, from a CRI log file (`<time> <stream> <P|F> <text>` per line;
/// `P` marks a partial line continued by the next).
pub fn read_log(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(parse_log(&text))
}

/// See [`read_log`].
pub fn parse_log(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut f = line.splitn(4, ' ');
        let (Some(_time), Some(_stream), Some(tag)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        out.push_str(f.next().unwrap_or_default());
        if tag != "P" {
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_partial_lines() {
        let log = "2024-01-01T00:00:00Z stdout P node /dev/a \n2024-01-01T00:00:00Z stdout F c 1:3\n2024-01-01T00:00:01Z stderr F oops\n";
        assert_eq!(parse_log(log), "node /dev/a c 1:3\noops\n");
    }
}
