//! The call on the wire: the request written at once, then the server's frames read until the
//! stream ends with a gRPC status.

use std::os::unix::net::UnixStream;
use std::time::Instant;

use loona_hpack::{Decoder, Encoder};

use crate::grpc::frame::{self, flag, kind, setting, Conn, Frame, MAX_FRAME, MAX_WINDOW};
use crate::grpc::status::{self, Code};
use crate::grpc::{CallError, MAX_HEADER_BLOCK};

/// The one stream of the connection (client streams are odd, the first is 1).
const STREAM: u32 = 1;

/// A call in progress.
pub(crate) struct Exchange {
    conn: Conn,
    max_answer: usize,
    decoder: Decoder<'static>,
    /// The response headers have come (`:status` 200).
    answered: bool,
    /// DATA of the stream so far (length-prefixed messages).
    body: Vec<u8>,
    /// A header block waiting for its CONTINUATION frames, and whether it ends the stream.
    block: Option<(Vec<u8>, bool)>,
}

impl Exchange {
    pub fn new(stream: UnixStream, deadline: Instant, max_answer: usize) -> Self {
        Self {
            conn: Conn::new(stream, deadline),
            max_answer,
            decoder: Decoder::new(),
            answered: false,
            body: Vec::new(),
            block: None,
        }
    }

    /// Sends the request for `method`, then reads until the answer or an error.
    pub fn run(mut self, method: &str, request: &[u8]) -> Result<Vec<u8>, CallError> {
        self.conn.send(&request_bytes(method, request))?;
        loop {
            let Some(frame) = self.conn.next()? else {
                return Err(CallError::protocol(
                    "the server closed the connection before the call ended",
                ));
            };
            if let Some(done) = self.on_frame(frame)? {
                return done;
            }
        }
    }

    /// Handles one frame; `Some` when the call is over.
    fn on_frame(&mut self, f: Frame) -> Result<Option<Result<Vec<u8>, CallError>>, CallError> {
        if self.block.is_some() && f.kind != kind::CONTINUATION {
            return Err(CallError::protocol(
                "a header block was interrupted by another frame",
            ));
        }
        match f.kind {
            kind::SETTINGS if !f.has(flag::ACK) => {
                if f.stream != 0 || !f.payload.len().is_multiple_of(6) {
                    return Err(CallError::protocol("a malformed SETTINGS frame"));
                }
                let mut ack = Vec::new();
                frame::put(&mut ack, kind::SETTINGS, flag::ACK, 0, &[]);
                self.conn.send(&ack)?;
            }
            kind::PING if !f.has(flag::ACK) => {
                if f.payload.len() != 8 {
                    return Err(CallError::protocol("a PING frame not of 8 bytes"));
                }
                let mut pong = Vec::new();
                frame::put(&mut pong, kind::PING, flag::ACK, 0, &f.payload);
                self.conn.send(&pong)?;
            }
            kind::GOAWAY => {
                let last = f
                    .payload
                    .first_chunk::<4>()
                    .map(|b| u32::from_be_bytes(*b) & MAX_WINDOW)
                    .ok_or_else(|| CallError::protocol("a GOAWAY frame too short"))?;
                if last < STREAM {
                    return Err(CallError::protocol(format!(
                        "the server refused the call (GOAWAY, HTTP/2 error {})",
                        error_code(&f.payload[4..])
                    )));
                }
                // The server finishes the streams it accepted; ours is one of them.
            }
            kind::RST_STREAM if f.stream == STREAM => {
                return Err(CallError::protocol(format!(
                    "the server reset the call (HTTP/2 error {})",
                    error_code(&f.payload)
                )));
            }
            kind::HEADERS if f.stream == STREAM => {
                let fragment = f.content()?.to_vec();
                let ends_stream = f.has(flag::END_STREAM);
                self.block = Some((fragment, ends_stream));
                if f.has(flag::END_HEADERS) {
                    return self.on_header_block();
                }
            }
            kind::CONTINUATION if f.stream == STREAM => {
                let Some((block, _)) = self.block.as_mut() else {
                    return Err(CallError::protocol("a CONTINUATION frame with no HEADERS"));
                };
                block.extend_from_slice(&f.payload);
                if block.len() > MAX_HEADER_BLOCK {
                    return Err(CallError::protocol(format!(
                        "a header block of more than {MAX_HEADER_BLOCK} bytes"
                    )));
                }
                if f.has(flag::END_HEADERS) {
                    return self.on_header_block();
                }
            }
            kind::DATA if f.stream == STREAM => {
                if !self.answered {
                    return Err(CallError::protocol("DATA before the response headers"));
                }
                self.body.extend_from_slice(f.content()?);
                if self.body.len() > self.max_answer.saturating_add(status::MESSAGE_PREFIX) {
                    return Err(CallError::AnswerTooLarge {
                        limit: self.max_answer,
                    });
                }
                if f.has(flag::END_STREAM) {
                    return Err(CallError::protocol(
                        "the answer ended without trailers (no grpc-status)",
                    ));
                }
            }
            // WINDOW_UPDATE, PRIORITY, acknowledgements, unknown types and other streams:
            // nothing to do for one call whose windows are already wide open.
            _ => {}
        }
        Ok(None)
    }

    /// Decodes a complete header block: the response headers, or the trailers that end the
    /// call (a "trailers-only" answer is both).
    fn on_header_block(&mut self) -> Result<Option<Result<Vec<u8>, CallError>>, CallError> {
        let Some((block, ends_stream)) = self.block.take() else {
            return Ok(None);
        };
        let mut http_status = None;
        let mut grpc_status = None;
        let mut grpc_message = String::new();
        self.decoder
            .decode_with_cb(&block, |name, value| match &*name {
                b":status" => http_status = Some(value.into_owned()),
                b"grpc-status" => grpc_status = Some(value.into_owned()),
                b"grpc-message" => grpc_message = status::decode_message(&value),
                _ => {}
            })
            .map_err(|e| CallError::protocol(format!("undecodable headers: {e}")))?;
        if !self.answered {
            match http_status.as_deref() {
                Some(b"200") => self.answered = true,
                Some(other) => {
                    return Err(CallError::protocol(format!(
                        "HTTP status {}",
                        String::from_utf8_lossy(other)
                    )))
                }
                None => return Err(CallError::protocol("response headers with no :status")),
            }
        }
        if !ends_stream {
            return Ok(None);
        }
        let code = Code::parse(
            grpc_status
                .as_deref()
                .ok_or_else(|| CallError::protocol("the call ended with no grpc-status"))?,
        )?;
        if code != Code::Ok {
            return Ok(Some(Err(CallError::Status {
                code,
                message: grpc_message,
            })));
        }
        let message = status::unframe_answer(&self.body)?;
        Ok(Some(Ok(message.to_vec())))
    }
}

/// Everything the client sends, in one write: the preface, SETTINGS opening the stream window
/// wide, a WINDOW_UPDATE doing the same for the connection, the request's HEADERS and its DATA
/// ending the stream.
fn request_bytes(method: &str, request: &[u8]) -> Vec<u8> {
    let mut out = frame::PREFACE.to_vec();
    let settings = frame::settings(&[
        (setting::ENABLE_PUSH, 0),
        (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW),
        (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_BLOCK as u32),
    ]);
    frame::put(&mut out, kind::SETTINGS, 0, 0, &settings);
    let grow = MAX_WINDOW - frame::INITIAL_WINDOW;
    frame::put(&mut out, kind::WINDOW_UPDATE, 0, 0, &grow.to_be_bytes());
    let headers: [(&[u8], &[u8]); 6] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", method.as_bytes()),
        // What grpc-go's own clients send on a Unix socket.
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    let block = Encoder::new().encode(headers);
    put_split(&mut out, kind::HEADERS, flag::END_HEADERS, &block);
    let message = status::frame_message(request);
    put_split(&mut out, kind::DATA, flag::END_STREAM, &message);
    out
}

/// `payload` as frames of at most [`MAX_FRAME`] bytes, `last_flags` on the last (HEADERS then
/// CONTINUATION for a header block, DATA for data).
fn put_split(out: &mut Vec<u8>, first_kind: u8, last_flags: u8, payload: &[u8]) {
    let chunks: Vec<&[u8]> = if payload.is_empty() {
        vec![&[]]
    } else {
        payload.chunks(MAX_FRAME).collect()
    };
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let kind = match (first_kind, i) {
            (kind::HEADERS, 0) => kind::HEADERS,
            (kind::HEADERS, _) => kind::CONTINUATION,
            (k, _) => k,
        };
        let flags = if i + 1 == n { last_flags } else { 0 };
        frame::put(out, kind, flags, STREAM, chunk);
    }
}

/// An HTTP/2 error code from the start of `bytes`, for messages.
fn error_code(bytes: &[u8]) -> String {
    bytes.first_chunk::<4>().map_or_else(
        || "unknown".to_owned(),
        |b| u32::from_be_bytes(*b).to_string(),
    )
}

#[cfg(test)]
mod tests {
    //! A scripted server on the other end of a socket pair: the frames it sends are written
    //! here by hand (its headers with the same HPACK codec), so every way a server can answer,
    //! or fail to, is one script.

    use std::io::{Read, Write};
    use std::time::Duration;

    use super::*;

    fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
        Encoder::new().encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::put(&mut out, kind, flags, stream, payload);
        out
    }

    fn ok_headers() -> Vec<u8> {
        frame(
            kind::HEADERS,
            flag::END_HEADERS,
            STREAM,
            &headers(&[(":status", "200"), ("content-type", "application/grpc")]),
        )
    }

    fn trailers(status: &str, message: &str) -> Vec<u8> {
        frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            STREAM,
            &headers(&[("grpc-status", status), ("grpc-message", message)]),
        )
    }

    fn data(message: &[u8]) -> Vec<u8> {
        frame(kind::DATA, 0, STREAM, &status::frame_message(message))
    }

    /// Runs a call against a server that sends `script`, holds the connection `hold` longer,
    /// closes its side and reads everything the client sent.
    fn serve(
        script: Vec<u8>,
        hold: Duration,
        deadline: Duration,
    ) -> (Result<Vec<u8>, CallError>, Vec<u8>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let peer = std::thread::spawn(move || {
            server.write_all(&script).unwrap();
            std::thread::sleep(hold);
            let _ = server.shutdown(std::net::Shutdown::Write);
            let mut sent = Vec::new();
            let _ = server.read_to_end(&mut sent);
            sent
        });
        let start = Instant::now();
        let result = Exchange::new(client, start + deadline, 1024)
            .run("/v1.PodResourcesLister/Get", b"request");
        CALL_TOOK.with(|t| t.set(start.elapsed()));
        (result, peer.join().unwrap())
    }

    std::thread_local! {
        /// How long the last [`serve`] call on this thread took, the server's hold excluded.
        static CALL_TOOK: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    }

    fn answer(script: Vec<u8>) -> Result<Vec<u8>, CallError> {
        serve(script, Duration::ZERO, Duration::from_secs(5)).0
    }

    fn settings() -> Vec<u8> {
        frame(
            kind::SETTINGS,
            0,
            0,
            &frame::settings(&[(setting::ENABLE_PUSH, 0)]),
        )
    }

    #[test]
    fn an_answer_with_trailers_is_the_message() {
        let script = [settings(), ok_headers(), data(b"answer"), trailers("0", "")].concat();
        let (got, sent) = serve(script, Duration::ZERO, Duration::from_secs(5));
        assert_eq!(got.unwrap(), b"answer");
        assert!(sent.starts_with(frame::PREFACE), "the preface first");
        let tail = &sent[sent.len() - 9..];
        assert_eq!(
            tail,
            frame(kind::SETTINGS, flag::ACK, 0, &[]),
            "the server's SETTINGS acknowledged last"
        );
        let request = status::frame_message(b"request");
        assert!(
            sent.windows(request.len()).any(|w| w == request),
            "the request message is sent"
        );
    }

    #[test]
    fn a_header_block_may_continue_and_frames_may_be_padded() {
        let block = headers(&[(":status", "200"), ("content-type", "application/grpc")]);
        let (a, b) = block.split_at(3);
        let mut padded = vec![4];
        padded.extend_from_slice(&status::frame_message(b"answer"));
        padded.extend_from_slice(&[0; 4]);
        let script = [
            frame(kind::HEADERS, 0, STREAM, a),
            frame(kind::CONTINUATION, flag::END_HEADERS, STREAM, b),
            frame(kind::DATA, flag::PADDED, STREAM, &padded),
            trailers("0", ""),
        ]
        .concat();
        assert_eq!(answer(script).unwrap(), b"answer");
    }

    #[test]
    fn a_ping_is_answered_with_its_payload() {
        let script = [
            frame(kind::PING, 0, 0, b"12345678"),
            ok_headers(),
            data(b"x"),
            trailers("0", ""),
        ]
        .concat();
        let (got, sent) = serve(script, Duration::ZERO, Duration::from_secs(5));
        assert_eq!(got.unwrap(), b"x");
        let pong = frame(kind::PING, flag::ACK, 0, b"12345678");
        assert!(sent.ends_with(&pong), "PING answered");
    }

    #[test]
    fn a_status_is_its_code_and_decoded_message() {
        let trailers_only = frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            STREAM,
            &headers(&[
                (":status", "200"),
                ("grpc-status", "2"),
                ("grpc-message", "pod %22x%22 not found"),
            ]),
        );
        match answer(trailers_only) {
            Err(CallError::Status { code, message }) => {
                assert_eq!(code, Code::Unknown);
                assert_eq!(message, "pod \"x\" not found");
            }
            other => panic!("{other:?}"),
        }
        match answer([ok_headers(), trailers("8", "rejected by rate limit")].concat()) {
            Err(CallError::Status { code, .. }) => assert_eq!(code, Code::ResourceExhausted),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_answer_over_the_limit_is_refused() {
        let big = vec![7u8; 2000];
        let script = [ok_headers(), data(&big), trailers("0", "")].concat();
        assert!(matches!(
            answer(script),
            Err(CallError::AnswerTooLarge { limit: 1024 })
        ));
    }

    #[test]
    fn a_silent_server_times_out_at_the_deadline() {
        let (got, _) = serve(
            settings(),
            Duration::from_secs(2),
            Duration::from_millis(200),
        );
        assert!(matches!(got, Err(CallError::Timeout)), "{got:?}");
        let took = CALL_TOOK.with(std::cell::Cell::get);
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_millis(1500),
            "{took:?}"
        );
    }

    #[test]
    fn broken_answers_are_protocol_errors_naming_what_broke() {
        let huge_frame = {
            let mut f = frame(kind::DATA, 0, STREAM, &[]);
            f[0] = 0x01; // 65536 bytes announced
            f
        };
        for (script, says) in [
            (settings(), "closed the connection before the call ended"),
            (ok_headers()[..5].to_vec(), "closed inside a frame"),
            (
                frame(kind::RST_STREAM, 0, STREAM, &[0, 0, 0, 2]),
                "reset the call (HTTP/2 error 2)",
            ),
            (
                frame(kind::GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 11]),
                "refused the call (GOAWAY, HTTP/2 error 11)",
            ),
            (huge_frame, "above the 16384"),
            (
                frame(
                    kind::HEADERS,
                    flag::END_HEADERS,
                    STREAM,
                    &headers(&[(":status", "503")]),
                ),
                "HTTP status 503",
            ),
            (data(b"early"), "DATA before the response headers"),
            (
                [
                    ok_headers(),
                    data(b"x"),
                    frame(kind::DATA, flag::END_STREAM, STREAM, &[]),
                ]
                .concat(),
                "without trailers",
            ),
            (
                [
                    ok_headers(),
                    frame(
                        kind::HEADERS,
                        flag::END_HEADERS | flag::END_STREAM,
                        STREAM,
                        &headers(&[("x", "y")]),
                    ),
                ]
                .concat(),
                "no grpc-status",
            ),
            (
                [ok_headers(), trailers("zero", "")].concat(),
                "grpc-status \"zero\" is not a number",
            ),
            (
                [ok_headers(), trailers("0", "")].concat(),
                "less than a message's prefix",
            ),
            (
                [frame(kind::HEADERS, 0, STREAM, &[0x88]), data(b"x")].concat(),
                "interrupted by another frame",
            ),
            (
                frame(
                    kind::HEADERS,
                    flag::END_HEADERS,
                    STREAM,
                    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                ),
                "undecodable headers",
            ),
        ] {
            let e = answer(script).unwrap_err();
            assert!(e.to_string().contains(says), "want {says:?}: {e}");
        }
    }
}
