//! One connection to containerd's NRI socket: register, then serve the plugin service until
//! containerd closes the connection or asks the plugin to shut down.
//!
//! # Concurrency and the request budget
//! Each `CreateContainer` is worked on its own thread and answered by its deadline (its arrival
//! plus [`Plugin::budget`]; the work itself, prepare steps included, ends a tenth of the budget
//! earlier): with the work's answer when it comes in time, with
//! [`BudgetError::Admission`] when it does not. The connection's reader goes on meanwhile, so one
//! slow container never holds up the answer to another request, nor the session noticing that
//! containerd went away. Work that missed its deadline finishes on its own (its prepare steps are
//! killed at the deadline); at most [`MAX_IN_FLIGHT`] are at work at once, and a request beyond
//! that is refused at once ([`BudgetError::Busy`]).

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use prost::Message as _;

use crate::api;
use crate::budget::BudgetError;
use crate::envelope;
use crate::error::NriError;
use crate::framing::{Message, Stream, REQUEST, RESPONSE};
use crate::metrics::{NriMetrics, Outcome};
use crate::mux::{read_frame, write_frames, PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::plugin::{Failure, Plugin, INTERNAL, INVALID_ARGUMENT};

/// What the plugin logs once containerd has accepted its registration (tests and operators
/// wait for it).
pub const REGISTERED: &str = "registered with the runtime";

/// The most container creations worked on at once (containerd asks one at a time; a request
/// beyond this is refused rather than left to pile up threads).
pub const MAX_IN_FLIGHT: usize = 16;

/// The runtime's service, which the plugin registers with.
const RUNTIME: &str = "nri.pkg.api.v1alpha1.Runtime";

/// How the plugin registers: its name, and its index (two digits: the order among plugins).
#[derive(Debug, Clone)]
pub struct Registration {
    pub name: String,
    pub index: String,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// containerd closed the connection (it stopped or restarted).
    Closed,
    /// containerd asked the plugin to shut down.
    Shutdown,
}

/// The trunk's writing side, shared by the threads answering requests.
type Writer = Arc<Mutex<UnixStream>>;

/// Connects to `socket`, registers and serves `plugin` until the session ends.
pub fn serve(
    socket: &Path,
    registration: &Registration,
    plugin: &Arc<Plugin>,
) -> Result<End, NriError> {
    let mut trunk =
        UnixStream::connect(socket).map_err(|e| NriError::Io("connect to the NRI socket", e))?;
    // However the session ends, the plugin is no longer connected.
    struct Disconnected<'a>(&'a NriMetrics);
    impl Drop for Disconnected<'_> {
        fn drop(&mut self) {
            self.0.disconnected();
        }
    }
    let _connected = Disconnected(plugin.metrics());
    let writer: Writer = Arc::new(Mutex::new(
        trunk
            .try_clone()
            .map_err(|e| NriError::Io("share the NRI socket", e))?,
    ));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let register = envelope::Request {
        service: RUNTIME.into(),
        method: "RegisterPlugin".into(),
        payload: api::RegisterPluginRequest {
            plugin_name: registration.name.clone(),
            plugin_idx: registration.index.clone(),
            nri_version: String::new(),
        }
        .encode_to_vec(),
        timeout_nano: 0,
        metadata: Vec::new(),
    };
    let call = Message {
        stream: 1,
        kind: REQUEST,
        payload: register.encode_to_vec(),
    };
    write(&writer, RUNTIME_SERVICE, &call.encode())?;
    let (mut calls, mut answers) = (Stream::default(), Stream::default());
    loop {
        let Some((conn, bytes)) = read_frame(&mut trunk)? else {
            return Ok(End::Closed);
        };
        match conn {
            PLUGIN_SERVICE => {
                calls.push(&bytes);
                while let Some(m) = calls.next_message()? {
                    if m.kind != REQUEST {
                        continue;
                    }
                    let arrived = Instant::now();
                    let req = match envelope::Request::decode(m.payload.as_slice()) {
                        Ok(req) => req,
                        Err(source) => {
                            let failure = Failure {
                                code: INVALID_ARGUMENT,
                                message: NriError::Decode {
                                    what: "a ttrpc request",
                                    source,
                                }
                                .to_string(),
                            };
                            reply(&writer, m.stream, Err(failure))?;
                            continue;
                        }
                    };
                    if req.method == "CreateContainer" {
                        dispatch(plugin, req, m.stream, arrived, &writer, &in_flight);
                        continue;
                    }
                    let deadline = arrived + plugin.budget().get();
                    let result = plugin.call(&req.service, &req.method, &req.payload, deadline);
                    reply(&writer, m.stream, result)?;
                    if req.method == "Shutdown" {
                        return Ok(End::Shutdown);
                    }
                }
            }
            RUNTIME_SERVICE => {
                answers.push(&bytes);
                while let Some(m) = answers.next_message()? {
                    if m.kind != RESPONSE || m.stream != 1 {
                        continue;
                    }
                    let reply =
                        envelope::Response::decode(m.payload.as_slice()).map_err(|source| {
                            NriError::Decode {
                                what: "the registration's response",
                                source,
                            }
                        })?;
                    if let Some(status) = reply.status.filter(|s| s.code != 0) {
                        return Err(NriError::Refused(status.message));
                    }
                    tracing::info!(
                        name = %registration.name,
                        index = %registration.index,
                        "{REGISTERED}"
                    );
                    plugin.metrics().registered();
                }
            }
            other => {
                return Err(NriError::Protocol(format!(
                    "a frame for connection {other}, which NRI does not open"
                )))
            }
        }
    }
}

/// Works `req` on its own thread and answers it by its deadline, with a budget failure when
/// the work is late; refuses it at once when [`MAX_IN_FLIGHT`] are at work.
fn dispatch(
    plugin: &Arc<Plugin>,
    req: envelope::Request,
    stream: u32,
    arrived: Instant,
    writer: &Writer,
    in_flight: &Arc<AtomicUsize>,
) {
    let budget = plugin.budget();
    let deadline = arrived + budget.get();
    // The work ends a little before the answer is due, so that a step killed at its deadline
    // is answered with its own message rather than the generic one.
    let work_deadline = deadline - budget.get() / 10;
    let answer_now = |failure: Failure, reason: &'static str| {
        plugin
            .metrics()
            .answered(Outcome::Refused(reason), arrived.elapsed());
        if let Err(e) = reply(writer, stream, Err(failure)) {
            tracing::warn!("cannot answer the runtime: {e}");
        }
    };
    let busy = in_flight.fetch_add(1, Ordering::SeqCst);
    if busy >= MAX_IN_FLIGHT {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        answer_now(
            plugin.refused(BudgetError::Busy { in_flight: busy }),
            "busy",
        );
        return;
    }
    let (done, result) = mpsc::sync_channel(1);
    let work = {
        let (plugin, in_flight) = (Arc::clone(plugin), Arc::clone(in_flight));
        move || {
            let answer = if req.service == crate::plugin::SERVICE {
                plugin.create(&req.payload, work_deadline)
            } else {
                let failure = plugin.call(&req.service, &req.method, &req.payload, work_deadline);
                (failure, Outcome::Refused("malformed"))
            };
            in_flight.fetch_sub(1, Ordering::SeqCst);
            // The answerer may have given up on it: then nobody listens.
            let _ = done.send(answer);
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("nri-create".into())
        .spawn(work)
    {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        answer_now(
            Failure {
                code: INTERNAL,
                message: format!("devinject: cannot start a thread for the container: {e}"),
            },
            "internal",
        );
        return;
    }
    let answerer = {
        let (plugin, writer) = (Arc::clone(plugin), Arc::clone(writer));
        move || {
            let left = deadline.saturating_duration_since(Instant::now());
            let (answer, outcome) = match result.recv_timeout(left) {
                Ok(answer) => answer,
                Err(mpsc::RecvTimeoutError::Timeout) => (
                    Err(plugin.refused(BudgetError::Admission { budget })),
                    Outcome::Refused("budget"),
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => (Err(Failure {
                    code: INTERNAL,
                    message: "devinject: admitting the container failed unexpectedly: see devinject-nri's log".into(),
                }), Outcome::Refused("internal")),
            };
            // What the runtime is sent: a late answer of the work is counted as the budget's.
            // Counted before the answer is written, so that whoever reads the answer finds it
            // counted.
            plugin.metrics().answered(outcome, arrived.elapsed());
            if let Err(e) = reply(&writer, stream, answer) {
                tracing::warn!("cannot answer the runtime: {e}");
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("nri-answer".into())
        .spawn(answerer)
    {
        // The work goes on; the runtime gets no answer from it and closes the plugin at its
        // timeout, which is as good as it gets without a thread.
        tracing::error!("cannot start a thread to answer the runtime: {e}");
    }
}

/// Writes `bytes` to connection `conn` of the shared trunk.
fn write(writer: &Writer, conn: u32, bytes: &[u8]) -> Result<(), NriError> {
    // A thread that panicked while writing left at worst a torn frame, which the runtime
    // refuses: the session ends either way.
    let mut trunk = writer
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    write_frames(&mut *trunk, conn, bytes)
}

/// Answers call `stream` of the plugin service with `result`.
fn reply(writer: &Writer, stream: u32, result: Result<Vec<u8>, Failure>) -> Result<(), NriError> {
    let response = match result {
        Ok(payload) => envelope::Response {
            status: None,
            payload,
        },
        Err(f) => envelope::Response {
            status: Some(envelope::Status {
                code: f.code,
                message: f.message,
            }),
            payload: Vec::new(),
        },
    };
    let out = Message {
        stream,
        kind: RESPONSE,
        payload: response.encode_to_vec(),
    };
    write(writer, PLUGIN_SERVICE, &out.encode())
}

#[cfg(test)]
mod tests {
    //! The runtime's side is played here: containerd serves NRI one request at a time, so it
    //! cannot be made to show that one slow container holds up no other request.

    use std::collections::BTreeMap;
    use std::os::unix::net::UnixListener;
    use std::time::Duration;

    use devinject_hostconfig::HostConfig;

    use super::*;

    fn request(stream: u32, method: &str, payload: Vec<u8>) -> Vec<u8> {
        let envelope = envelope::Request {
            service: crate::plugin::SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano: 0,
            metadata: Vec::new(),
        };
        Message {
            stream,
            kind: REQUEST,
            payload: envelope.encode_to_vec(),
        }
        .encode()
    }

    /// The next response on the plugin's connection: its stream and envelope.
    fn response(trunk: &mut UnixStream, calls: &mut Stream) -> (u32, envelope::Response) {
        loop {
            if let Some(m) = calls.next_message().unwrap() {
                return (
                    m.stream,
                    envelope::Response::decode(m.payload.as_slice()).unwrap(),
                );
            }
            let (conn, bytes) = read_frame(trunk).unwrap().expect("the plugin answers");
            if conn == PLUGIN_SERVICE {
                calls.push(&bytes);
            }
        }
    }

    /// A container whose admission outlives the budget (here the kubelet accepts the pod-resources
    /// call and never answers) is answered with a failure at the budget, and a request sent after
    /// it is answered first, while it is still at work.
    #[test]
    fn a_slow_container_is_answered_at_its_budget_and_holds_up_no_other_request() {
        let dir = tempfile::tempdir().unwrap();
        let profiles = dir.path().join("profiles");
        std::fs::create_dir(&profiles).unwrap();
        let kvm = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/kvm.toml");
        std::fs::copy(kvm, profiles.join("kvm.toml")).unwrap();
        // Connections queue in the backlog; nothing ever reads them.
        let kubelet = dir.path().join("kubelet.sock");
        let _silent_kubelet = UnixListener::bind(&kubelet).unwrap();
        let config = HostConfig {
            profiles_dir: profiles,
            pod_resources_socket: kubelet,
            pod_resources_timeout_ms: 5000,
            nri_request_budget_ms: 300,
            ..HostConfig::default()
        };
        let socket = dir.path().join("nri.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let plugin = Arc::new(Plugin::new(config, None));
        let registration = Registration {
            name: "devinject".into(),
            index: "10".into(),
        };
        let session = {
            let plugin = Arc::clone(&plugin);
            std::thread::spawn(move || serve(&socket, &registration, &plugin))
        };
        let (mut trunk, _) = listener.accept().unwrap();
        let (conn, _) = read_frame(&mut trunk).unwrap().expect("the registration");
        assert_eq!(conn, RUNTIME_SERVICE);
        let registered = Message {
            stream: 1,
            kind: RESPONSE,
            payload: envelope::Response::default().encode_to_vec(),
        };
        write_frames(&mut trunk, RUNTIME_SERVICE, &registered.encode()).unwrap();

        let annotations: BTreeMap<String, String> = [
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-uid", "uid-1"),
            ("io.kubernetes.cri.sandbox-name", "pod"),
            ("io.kubernetes.cri.sandbox-namespace", "default"),
            ("io.kubernetes.cri.container-name", "main"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let create = api::CreateContainerRequest {
            pod: None,
            container: Some(api::Container {
                name: "main".into(),
                env: vec!["KVM_VISIBLE_DEVICES=all".into()],
                annotations,
                ..api::Container::default()
            }),
        };
        let sent = Instant::now();
        let mut wire = request(1, "CreateContainer", create.encode_to_vec());
        wire.extend(request(3, "Synchronize", Vec::new()));
        write_frames(&mut trunk, PLUGIN_SERVICE, &wire).unwrap();

        let mut calls = Stream::default();
        let (first, _) = response(&mut trunk, &mut calls);
        assert_eq!(first, 3, "the later request is answered first");
        let (second, answer) = response(&mut trunk, &mut calls);
        let took = sent.elapsed();
        assert_eq!(second, 1);
        let status = answer.status.expect("a failure");
        assert!(
            status
                .message
                .contains("not admitted within the NRI request budget of 300 ms")
                && status.message.contains("plugin_request_timeout"),
            "{}",
            status.message
        );
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "answered after {took:?}"
        );
        drop(trunk);
        assert_eq!(session.join().unwrap().unwrap(), End::Closed);
        // What the runtime was sent is what is counted: the budget's refusal, the session's
        // registration, and no connection once it ended.
        let mut registry = prometheus_client::registry::Registry::default();
        plugin.metrics().register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "devinject_nri_refusals_total{reason=\"budget\"} 1\n",
            "devinject_nri_create_container_duration_seconds_count{outcome=\"refused\"} 1\n",
            "devinject_nri_registrations_total 1\n",
            "devinject_nri_connected 0\n",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
