//! One connection to containerd's NRI socket: register, then serve the plugin service until
//! containerd closes the connection or asks the plugin to shut down.

use std::os::unix::net::UnixStream;
use std::path::Path;

use prost::Message as _;

use crate::api;
use crate::envelope;
use crate::error::NriError;
use crate::framing::{Message, Stream, REQUEST, RESPONSE};
use crate::mux::{read_frame, write_frames, PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::plugin::{Failure, Plugin};

/// What the plugin logs once containerd has accepted its registration (tests and operators
/// wait for it).
pub const REGISTERED: &str = "registered with the runtime";

/// The runtime's service, which the plugin registers with.
const RUNTIME: &str = "nri.pkg.api.v1alpha1.Runtime";

/// How the plugin registers: its name, and its index (two digits: the order among plugins).
#[derive(Debug, Clone)]
pub struct Registration {
    /// The name.
    pub name: String,
    /// The index.
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

/// Connects to `socket`, registers and serves `plugin` until the session ends.
pub fn serve(socket: &Path, registration: &Registration, plugin: &Plugin) -> Result<End, NriError> {
    let mut trunk =
        UnixStream::connect(socket).map_err(|e| NriError::Io("connect to the NRI socket", e))?;
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
    write_frames(&mut trunk, RUNTIME_SERVICE, &call.encode())?;
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
                    let (reply, method) = answer(plugin, &m.payload);
                    let out = Message {
                        stream: m.stream,
                        kind: RESPONSE,
                        payload: reply.encode_to_vec(),
                    };
                    write_frames(&mut trunk, PLUGIN_SERVICE, &out.encode())?;
                    if method == "Shutdown" {
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

/// The response envelope for one request envelope, and the method called.
fn answer(plugin: &Plugin, payload: &[u8]) -> (envelope::Response, String) {
    let (result, method) = match envelope::Request::decode(payload) {
        Ok(req) => (
            plugin.call(&req.service, &req.method, &req.payload),
            req.method,
        ),
        Err(source) => (
            Err(Failure {
                code: 3,
                message: NriError::Decode {
                    what: "a ttrpc request",
                    source,
                }
                .to_string(),
            }),
            String::new(),
        ),
    };
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
    (response, method)
}
