//! ttrpc framing on one of the trunk's connections: each message is a 10-byte header (payload
//! length and stream id, big-endian `u32`s, then the message type and flags) and a protobuf
//! `Request` or `Response` envelope.
//!
//! Written here rather than taken from the `ttrpc` crate: that crate's clients and servers each
//! own a socket (a connected fd, a listening fd), while NRI carries a server and a client over
//! one socket behind its own multiplexing, and its prost support pins another prost major than
//! the workspace's. What is needed is this framing and two envelopes (`proto/ttrpc.proto`).

use crate::error::NriError;

/// The length of a message header.
pub const HEADER: usize = 10;
/// The largest message ttrpc allows.
pub const MAX_MESSAGE: usize = 4 << 20;
pub const REQUEST: u8 = 1;
pub const RESPONSE: u8 = 2;

/// One ttrpc message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The stream (call) id: odd for calls the client starts.
    pub stream: u32,
    /// [`REQUEST`] or [`RESPONSE`] (or another type, which the plugin ignores).
    pub kind: u8,
    /// The encoded envelope.
    pub payload: Vec<u8>,
}

impl Message {
    /// The message's bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.payload.len());
        out.extend_from_slice(&(self.payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.kind);
        out.push(0);
        out.extend_from_slice(&self.payload);
        out
    }
}

/// One connection's byte stream, cut into messages as its frames arrive.
#[derive(Debug, Default)]
pub struct Stream {
    buf: Vec<u8>,
}

impl Stream {
    /// Appends bytes that arrived for this connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one has arrived.
    pub fn next_message(&mut self) -> Result<Option<Message>, NriError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_MESSAGE {
            return Err(NriError::Protocol(format!(
                "a ttrpc message of {len} bytes, more than ttrpc's {MAX_MESSAGE}"
            )));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let stream = u32::from_be_bytes(self.buf[4..8].try_into().expect("4 bytes"));
        let kind = self.buf[8];
        let payload = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some(Message {
            stream,
            kind,
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_arrive_whole_whatever_the_frames_cut() {
        let a = Message {
            stream: 1,
            kind: REQUEST,
            payload: b"hello".to_vec(),
        };
        let b = Message {
            stream: 3,
            kind: RESPONSE,
            payload: Vec::new(),
        };
        let wire = [a.encode(), b.encode()].concat();
        for cut in 0..wire.len() {
            let mut s = Stream::default();
            let mut got = Vec::new();
            for part in [&wire[..cut], &wire[cut..]] {
                s.push(part);
                while let Some(m) = s.next_message().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, [a.clone(), b.clone()], "cut at {cut}");
        }
    }

    #[test]
    fn an_oversized_message_is_an_error() {
        let mut s = Stream::default();
        s.push(&((MAX_MESSAGE as u32) + 1).to_be_bytes());
        s.push(&[0; 6]);
        assert!(matches!(s.next_message(), Err(NriError::Protocol(_))));
    }
}
