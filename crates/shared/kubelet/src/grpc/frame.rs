//! HTTP/2 frames (RFC 9113 section 4 and 6): the 9-byte header, the types and flags this
//! client uses, and reading one frame from a connection under a deadline.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use crate::grpc::CallError;

/// What a client sends first (RFC 9113 section 3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload either side may send unless the other announces more; this
/// client never does.
pub(crate) const MAX_FRAME: usize = 16_384;

/// The largest window HTTP/2 allows.
pub(crate) const MAX_WINDOW: u32 = 0x7fff_ffff;

/// The window every stream and the connection start with.
pub(crate) const INITIAL_WINDOW: u32 = 65_535;

/// Frame types.
pub(crate) mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub(crate) mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION: the header block is complete.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS: a pad length byte first, padding last.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: a stream dependency and weight (5 bytes) before the block.
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers.
pub(crate) mod setting {
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// One frame as read.
#[derive(Debug)]
pub(crate) struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The payload without padding and, for HEADERS, the priority fields (RFC 9113 6.1, 6.2).
    pub fn content(&self) -> Result<&[u8], CallError> {
        let mut body = &self.payload[..];
        let mut pad = 0;
        if self.has(flag::PADDED) {
            let (&n, rest) = body
                .split_first()
                .ok_or_else(|| CallError::protocol("a padded frame with no pad length"))?;
            pad = usize::from(n);
            body = rest;
        }
        if self.kind == kind::HEADERS && self.has(flag::PRIORITY) {
            body = body
                .get(5..)
                .ok_or_else(|| CallError::protocol("a HEADERS frame too short for its priority"))?;
        }
        body.len()
            .checked_sub(pad)
            .map(|end| &body[..end])
            .ok_or_else(|| CallError::protocol("a frame's padding is longer than the frame"))
    }
}

/// Appends a frame to `out`.
pub(crate) fn put(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    debug_assert!(payload.len() <= MAX_FRAME);
    let len = u32::try_from(payload.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A SETTINGS payload of `(identifier, value)` pairs.
pub(crate) fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    pairs
        .iter()
        .flat_map(|(id, value)| id.to_be_bytes().into_iter().chain(value.to_be_bytes()))
        .collect()
}

/// A connection whose every read and write ends by a deadline.
pub(crate) struct Conn {
    stream: UnixStream,
    deadline: Instant,
}

impl Conn {
    pub fn new(stream: UnixStream, deadline: Instant) -> Self {
        Self { stream, deadline }
    }

    /// Arms the socket's timeouts with what is left of the deadline.
    fn arm(&self) -> Result<(), CallError> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(CallError::Timeout)?;
        self.stream
            .set_read_timeout(Some(left))
            .and_then(|()| self.stream.set_write_timeout(Some(left)))
            .map_err(|source| CallError::Io {
                step: "time",
                source,
            })
    }

    /// Writes all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), CallError> {
        let mut rest = bytes;
        while !rest.is_empty() {
            self.arm()?;
            match self.stream.write(rest) {
                Ok(0) => {
                    return Err(CallError::Io {
                        step: "write to",
                        source: io::ErrorKind::WriteZero.into(),
                    })
                }
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("write to", e)),
            }
        }
        Ok(())
    }

    /// Fills `buf`; `Ok(false)` when the peer closed the connection before its first byte.
    fn fill(&mut self, buf: &mut [u8]) -> Result<bool, CallError> {
        let mut got = 0;
        while got < buf.len() {
            self.arm()?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return Err(CallError::protocol("the connection closed inside a frame")),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("read from", e)),
            }
        }
        Ok(true)
    }

    /// The next frame; `None` when the peer closed the connection between frames.
    pub fn next(&mut self) -> Result<Option<Frame>, CallError> {
        let mut head = [0u8; 9];
        if !self.fill(&mut head)? {
            return Ok(None);
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        if len > MAX_FRAME {
            return Err(CallError::protocol(format!(
                "a frame of {len} bytes, above the {MAX_FRAME} this client allows"
            )));
        }
        let mut payload = vec![0; len];
        if !self.fill(&mut payload)? && len > 0 {
            return Err(CallError::protocol("the connection closed inside a frame"));
        }
        Ok(Some(Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW,
            payload,
        }))
    }
}

/// A read or write error: a timeout when the socket's timeout fired, else the error.
fn io_error(step: &'static str, e: io::Error) -> CallError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => CallError::Timeout,
        _ => CallError::Io { step, source: e },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Frame {
        Frame {
            kind,
            flags,
            stream: 1,
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn a_frame_is_nine_bytes_of_header_then_its_payload() {
        let mut out = Vec::new();
        put(&mut out, kind::DATA, flag::END_STREAM, 1, b"xyz");
        assert_eq!(out, [0, 0, 3, 0, 1, 0, 0, 0, 1, b'x', b'y', b'z']);
        assert_eq!(
            settings(&[(setting::ENABLE_PUSH, 0), (setting::INITIAL_WINDOW_SIZE, 7)]),
            [0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0, 7]
        );
    }

    #[test]
    fn padding_and_priority_are_taken_off() {
        assert_eq!(frame(kind::DATA, 0, b"ab").content().unwrap(), b"ab");
        assert_eq!(
            frame(kind::DATA, flag::PADDED, &[2, b'a', b'b', 0, 0])
                .content()
                .unwrap(),
            b"ab"
        );
        let with_priority = [0, 0, 0, 3, 16, b'h'];
        assert_eq!(
            frame(kind::HEADERS, flag::PRIORITY, &with_priority)
                .content()
                .unwrap(),
            b"h"
        );
        let both = [1, 0, 0, 0, 3, 16, b'h', 0];
        assert_eq!(
            frame(kind::HEADERS, flag::PRIORITY | flag::PADDED, &both)
                .content()
                .unwrap(),
            b"h"
        );
    }

    #[test]
    fn padding_longer_than_the_frame_is_an_error_not_a_panic() {
        for (kind, flags, payload) in [
            (kind::DATA, flag::PADDED, &[][..]),
            (kind::DATA, flag::PADDED, &[9, 1, 2][..]),
            (kind::HEADERS, flag::PRIORITY, &[0, 0][..]),
            (
                kind::HEADERS,
                flag::PRIORITY | flag::PADDED,
                &[3, 0, 0, 0, 0, 0][..],
            ),
        ] {
            assert!(
                frame(kind, flags, payload).content().is_err(),
                "{payload:?}"
            );
        }
    }
}
