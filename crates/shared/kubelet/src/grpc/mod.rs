//! One gRPC unary call over a Unix socket, blocking, with no async runtime: what a short-lived
//! process asking a local daemon one question needs (the request policy asking the
//! kubelet).
//!
//! # Why not tonic
//!
//! tonic is the client everywhere else. For one call from a process that lives for that call,
//! it costs more than the call: measured on Kubernetes 1.36 (docs/benchmarks.md, section 6, the
//! helper without tokio against the tonic build), the tonic helper spent 1.5 ms of CPU per start
//! building a tokio runtime, a channel with its worker task and a hyper connection, for a
//! 200-byte exchange, and the
//! policy's target is 1 ms for the whole start. This module writes the HTTP/2 frames of one
//! stream itself (RFC 9113: the connection preface, SETTINGS, one HEADERS and DATA frame out;
//! SETTINGS and PING acknowledged, HEADERS, CONTINUATION and DATA read back) and leaves header
//! compression to a maintained HPACK codec (`loona-hpack`): the server's answer uses Huffman
//! coding and the dynamic table, which is a codec's job.
//!
//! # Bounds
//!
//! Everything the peer sends is bounded: frames by the default maximum frame size (16 KiB; we
//! never announce a larger one), a header block by [`MAX_HEADER_BLOCK`], the answer by the
//! caller's `max_answer`, and time by the caller's deadline, checked before every read and
//! write. Flow control never stalls the answer: the client opens its windows to the largest
//! value HTTP/2 allows and enforces `max_answer` itself.

mod error;
mod exchange;
mod frame;
mod status;

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

pub use error::CallError;
pub use status::Code;

/// The largest header block (HEADERS and its CONTINUATION frames) read from the server.
pub const MAX_HEADER_BLOCK: usize = 64 << 10;

/// The largest request message: it must fit the 64 KiB stream window a server starts with,
/// since the request is written before the server's SETTINGS are read.
pub const MAX_REQUEST: usize = 65_535 - status::MESSAGE_PREFIX;

/// One unary call.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The server's Unix socket.
    pub socket: &'a Path,
    /// The method's path, `/<package>.<Service>/<Method>`.
    pub method: &'a str,
    /// The request message, already encoded (protobuf).
    pub request: &'a [u8],
    /// When the call must be over, answer read or not.
    pub deadline: Instant,
    /// The largest answer message accepted.
    pub max_answer: usize,
}

/// Makes `call` on a connection of its own and returns the answer message (protobuf, still
/// encoded), or the gRPC status the server answered with, or why there was no answer.
pub fn call(call: &Call<'_>) -> Result<Vec<u8>, CallError> {
    if call.request.len() > MAX_REQUEST {
        return Err(CallError::RequestTooLarge {
            size: call.request.len(),
            limit: MAX_REQUEST,
        });
    }
    if Instant::now() >= call.deadline {
        return Err(CallError::Timeout);
    }
    let stream =
        UnixStream::connect(call.socket).map_err(|source| CallError::Connect { source })?;
    exchange::Exchange::new(stream, call.deadline, call.max_answer).run(call.method, call.request)
}
