//! Serving the gRPC clients that name a Unix socket path as the HTTP/2 `:authority`, and
//! binding the sockets they dial under one rule ([`crate::socket::bind()`]: a stale socket replaced, anything
//! else refused).
//!
//! Kubelets before 1.26 (grpc-go dialling `unix://` paths), gRPC C-core clients (Python grpcio)
//! and grpc-java send the plugin's socket path, e.g. `/var/lib/kubelet/device-plugins/x.sock`,
//! as `:authority`. That is not an RFC 3986 authority, and the `h2` crate under tonic answers
//! every such request with `RST_STREAM(PROTOCOL_ERROR)` (hyperium/h2 PR 487, still open): a real
//! kubelet 1.20 registered the plugin and then could never call it. No option of h2, hyper or
//! tonic relaxes the check.
//!
//! So each accepted connection passes through a small HTTP/2 rewriter on its way to tonic: frames
//! from the client are read one by one; every header block (HEADERS plus its CONTINUATION frames)
//! is decoded with the connection's HPACK decoder, a `:authority` that is not a valid authority
//! becomes `localhost` (what kubelets from 1.26 send), and the block is encoded again with the
//! connection's own HPACK encoder, so that the server's decoder state follows our encoder, never
//! the client's. Every other frame, and everything the server sends back, passes byte for byte.
//! Padding and priority fields of HEADERS are dropped (padding is optional, and priority is
//! advisory and deprecated by RFC 9113). This is not a fork of an HTTP/2 library: it parses only
//! the frame header and header blocks, with the maintained `loona-hpack` codec (the one the
//! pod-resources client uses too).
//!
//! Bounds: a header block may be at most [`MAX_HEADER_BLOCK`] bytes (h2's own default limit is
//! 16 KiB of decoded headers); a client exceeding it, sending a malformed frame or block, or an
//! unexpected CONTINUATION loses its connection, which is logged. Blocks are re-framed at
//! [`MAX_FRAME_OUT`] bytes, the HTTP/2 default maximum frame size our server keeps. How many
//! connections a server holds, and how long one may take to send its preface, is
//! [`crate::connections`]' part: it starts each connection's relay.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use loona_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

/// The client connection preface (RFC 9113, section 3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest header block (HEADERS and its CONTINUATIONs) accepted from a client.
pub const MAX_HEADER_BLOCK: usize = 256 << 10;
/// The largest frame payload we write: the HTTP/2 default `SETTINGS_MAX_FRAME_SIZE`.
pub const MAX_FRAME_OUT: usize = 16_384;
/// The authority a rewritten request names.
const LOCALHOST: &[u8] = b"localhost";

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// The per-connection state of the client-to-server direction.
pub struct Rewriter {
    decoder: Decoder<'static>,
    encoder: Encoder<'static>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Rewriter {
    /// A rewriter for a new connection.
    pub fn new() -> Self {
        Self {
            decoder: Decoder::new(),
            encoder: Encoder::new(),
        }
    }

    /// Copies the client's bytes from `from` to `to`, rewriting header blocks, until `from`
    /// ends between frames: [`preface`] then [`Rewriter::frames`].
    pub async fn pump(
        &mut self,
        mut from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
    ) -> io::Result<()> {
        preface(&mut from).await?;
        to.write_all(PREFACE).await?;
        self.frames(from, to).await
    }

    /// Copies the client's frames that follow its preface from `from` to `to`, rewriting header
    /// blocks, until `from` ends between frames.
    pub async fn frames(
        &mut self,
        mut from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
    ) -> io::Result<()> {
        loop {
            let mut head = [0u8; 9];
            match from.read_exact(&mut head).await {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let stream = [head[5], head[6], head[7], head[8]];
            match kind {
                HEADERS => {
                    let block = self.read_block(&mut from, len, flags, stream).await?;
                    let out = self.rewrite(&block)?;
                    write_headers(&mut to, flags & END_STREAM, stream, &out).await?;
                }
                CONTINUATION => return Err(bad("CONTINUATION without HEADERS")),
                _ => {
                    to.write_all(&head).await?;
                    let copied =
                        tokio::io::copy(&mut (&mut from).take(len as u64), &mut to).await?;
                    if copied != len as u64 {
                        return Err(bad("truncated frame"));
                    }
                }
            }
            to.flush().await?;
        }
    }

    /// Reads a HEADERS payload of `len` bytes and its CONTINUATIONs: the header block.
    async fn read_block(
        &mut self,
        from: &mut (impl AsyncRead + Unpin),
        len: usize,
        flags: u8,
        stream: [u8; 4],
    ) -> io::Result<Vec<u8>> {
        if len > MAX_HEADER_BLOCK {
            return Err(bad("header block too large"));
        }
        let mut payload = vec![0u8; len];
        from.read_exact(&mut payload).await?;
        let mut block = fragment(&payload, flags)?.to_vec();
        let mut done = flags & END_HEADERS != 0;
        while !done {
            let mut head = [0u8; 9];
            from.read_exact(&mut head).await?;
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            if head[3] != CONTINUATION || head[5..9] != stream {
                return Err(bad("a header block interrupted by another frame"));
            }
            if block.len() + len > MAX_HEADER_BLOCK {
                return Err(bad("header block too large"));
            }
            let start = block.len();
            block.resize(start + len, 0);
            from.read_exact(&mut block[start..]).await?;
            done = head[4] & END_HEADERS != 0;
        }
        Ok(block)
    }

    /// Decodes `block`, replaces an invalid `:authority` and encodes the result.
    pub fn rewrite(&mut self, block: &[u8]) -> io::Result<Vec<u8>> {
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut size = 0usize;
        self.decoder
            .decode_with_cb(block, |name: Cow<[u8]>, value: Cow<[u8]>| {
                size += name.len() + value.len() + 32;
                let value = if &*name == b":authority" && !valid_authority(&value) {
                    tracing::debug!(authority = %String::from_utf8_lossy(&value), "rewriting a socket-path :authority to localhost");
                    LOCALHOST.to_vec()
                } else {
                    value.into_owned()
                };
                headers.push((name.into_owned(), value));
            })
            .map_err(|e| bad(&format!("bad header block: {e:?}")))?;
        if size > MAX_HEADER_BLOCK {
            return Err(bad("header list too large"));
        }
        Ok(self
            .encoder
            .encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))))
    }
}

/// Reads the client connection preface from `from`; an error if it is anything else.
pub async fn preface(from: &mut (impl AsyncRead + Unpin)) -> io::Result<()> {
    let mut preface = [0u8; 24];
    from.read_exact(&mut preface).await?;
    if &preface != PREFACE {
        return Err(bad("not an HTTP/2 connection preface"));
    }
    Ok(())
}

/// The header block fragment of a HEADERS payload, without padding and priority fields.
fn fragment(payload: &[u8], flags: u8) -> io::Result<&[u8]> {
    let mut body = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        let (&n, rest) = body
            .split_first()
            .ok_or_else(|| bad("short padded HEADERS"))?;
        pad = usize::from(n);
        body = rest;
    }
    if flags & PRIORITY != 0 {
        body = body.get(5..).ok_or_else(|| bad("short HEADERS priority"))?;
    }
    let keep = body
        .len()
        .checked_sub(pad)
        .ok_or_else(|| bad("HEADERS padding longer than its payload"))?;
    Ok(&body[..keep])
}

/// Whether h2 accepts `value` as an authority.
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Writes `block` as a HEADERS frame and as many CONTINUATIONs as [`MAX_FRAME_OUT`] needs.
async fn write_headers(
    to: &mut (impl AsyncWrite + Unpin),
    end_stream: u8,
    stream: [u8; 4],
    block: &[u8],
) -> io::Result<()> {
    let mut chunks = block.chunks(MAX_FRAME_OUT).peekable();
    let mut kind = HEADERS;
    let mut flags = end_stream;
    if chunks.peek().is_none() {
        // An empty block still needs its HEADERS frame.
        return to
            .write_all(&frame_head(0, HEADERS, end_stream | END_HEADERS, stream))
            .await;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        to.write_all(&frame_head(chunk.len(), kind, flags, stream))
            .await?;
        to.write_all(chunk).await?;
        kind = CONTINUATION;
        flags = 0;
    }
    Ok(())
}

fn frame_head(len: usize, kind: u8, flags: u8, stream: [u8; 4]) -> [u8; 9] {
    let l = (len as u32).to_be_bytes();
    [
        l[1], l[2], l[3], kind, flags, stream[0], stream[1], stream[2], stream[3],
    ]
}

/// One side of an in-memory pipe that tonic serves like an accepted socket.
pub struct Proxied(pub DuplexStream);

impl tonic::transport::server::Connected for Proxied {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Proxied {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Proxied {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Relays one accepted client connection to `server`, the other end of the pipe tonic serves
/// as [`Proxied`], rewriting the client's header blocks; returns when either direction ends.
/// `head` is what was already read from the client. The client's preface must come by
/// `preface_by`, else the connection ends; `prefaced` is called once it has come, before the
/// server sees it.
pub(crate) async fn relay(
    client: tokio::net::UnixStream,
    head: &[u8],
    server: DuplexStream,
    preface_by: tokio::time::Instant,
    prefaced: impl FnOnce(),
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (server_read, mut server_write) = tokio::io::split(server);
    let up = async {
        let mut first = head.chain(&mut client_read);
        let r = match tokio::time::timeout_at(preface_by, preface(&mut first)).await {
            Err(_) => {
                tracing::debug!("closing a gRPC connection: no HTTP/2 preface by its deadline");
                return;
            }
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => {
                prefaced();
                match server_write.write_all(PREFACE).await {
                    Ok(()) => Rewriter::new().frames(client_read, server_write).await,
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = &r {
            tracing::warn!(error = %e, "closing a gRPC connection: its HTTP/2 was not understood");
        }
    };
    let down = async {
        let mut server_read = server_read;
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    // Either direction ending ends the connection.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// A gRPC channel over the Unix socket at `path`, dialled as today's kubelet dials a plugin:
/// connected once (no reconnects), with `localhost` as the `:authority`.
pub async fn connect(
    path: &std::path::Path,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let target = path.to_owned();
    // The URI is required by the API but unused: the connector decides where to go.
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let target = target.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(target).await?;
                Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(headers: &[(&[u8], &[u8])]) -> Vec<u8> {
        Encoder::new().encode(headers.iter().copied())
    }

    fn decode(d: &mut Decoder<'_>, b: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        d.decode(b).unwrap()
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_the_rest_stays() {
        let mut r = Rewriter::new();
        let mut server = Decoder::new();
        let path: &[u8] = b"/var/lib/kubelet/device-plugins/devinject-kvm.sock";
        for authority in [path, b"localhost", b"unix:///x.sock", b"%2Fvar%2Frun"] {
            let input = block(&[
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/v1beta1.DevicePlugin/Allocate"),
                (b":authority", authority),
                (b"content-type", b"application/grpc"),
            ]);
            let out = decode(&mut server, &r.rewrite(&input).unwrap());
            let got = |k: &[u8]| out.iter().find(|(n, _)| n == k).unwrap().1.clone();
            let want: &[u8] = if valid_authority(authority) {
                authority
            } else {
                LOCALHOST
            };
            assert_eq!(
                got(b":authority"),
                want,
                "{:?}",
                String::from_utf8_lossy(authority)
            );
            assert_eq!(got(b":path"), b"/v1beta1.DevicePlugin/Allocate");
            assert_eq!(out.len(), 5);
        }
        assert!(!valid_authority(path));
        // No :authority at all (HTTP/2 makes it optional): nothing is added.
        let input = block(&[
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/v1beta1.DevicePlugin/Allocate"),
        ]);
        let out = decode(&mut server, &r.rewrite(&input).unwrap());
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|(n, _)| n != b":authority"));
    }

    #[test]
    fn padding_and_priority_are_stripped() {
        let mut p = vec![3u8];
        p.extend([0, 0, 0, 1, 16]);
        p.extend(b"abc");
        p.extend([0, 0, 0]);
        assert_eq!(fragment(&p, PADDED | PRIORITY).unwrap(), b"abc");
        assert!(fragment(&[9, 1, 2], PADDED).is_err());
        assert!(fragment(&[1, 2], PRIORITY).is_err());
    }

    /// Frames as a client sends them: the preface, SETTINGS, a padded HEADERS split over a
    /// CONTINUATION, a DATA frame; out: the same with one rewritten block.
    #[tokio::test]
    async fn frames_pass_and_header_blocks_are_rewritten() {
        let input = block(&[
            (b":method", b"POST"),
            (b":authority", b"/run/plugin.sock"),
            (b":path", b"/x"),
        ]);
        let (a, b) = input.split_at(5);
        let stream = [0, 0, 0, 1];
        let mut wire = PREFACE.to_vec();
        wire.extend(frame_head(0, 0x4, 0, [0; 4]));
        let mut headers = vec![2u8];
        headers.extend(a);
        headers.extend([0, 0]);
        wire.extend(frame_head(headers.len(), HEADERS, PADDED, stream));
        wire.extend(&headers);
        wire.extend(frame_head(b.len(), CONTINUATION, END_HEADERS, stream));
        wire.extend(b);
        wire.extend(frame_head(3, 0x0, END_STREAM, stream));
        wire.extend(b"xyz");
        let mut out = Vec::new();
        Rewriter::new().pump(&wire[..], &mut out).await.unwrap();
        assert_eq!(&out[..24], PREFACE);
        assert_eq!(&out[24..33], frame_head(0, 0x4, 0, [0; 4]));
        let len = usize::from(out[35]) | usize::from(out[34]) << 8;
        assert_eq!((out[36], out[37]), (HEADERS, END_HEADERS));
        let got = Decoder::new().decode(&out[42..42 + len]).unwrap();
        assert_eq!(got[1], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(
            &out[42 + len..],
            &[frame_head(3, 0, END_STREAM, stream).as_slice(), b"xyz"].concat()[..]
        );
    }

    #[tokio::test]
    async fn malformed_clients_lose_their_connection() {
        let mut out = Vec::new();
        let e = Rewriter::new()
            .pump(&b"GET / HTTP/1.1\r\n\r\n........"[..], &mut out)
            .await;
        assert!(e.is_err());
        let mut wire = PREFACE.to_vec();
        wire.extend(frame_head(
            MAX_HEADER_BLOCK + 1,
            HEADERS,
            END_HEADERS,
            [0, 0, 0, 1],
        ));
        let e = Rewriter::new().pump(&wire[..], &mut Vec::new()).await;
        assert_eq!(e.unwrap_err().to_string(), "header block too large");
        let mut wire = PREFACE.to_vec();
        wire.extend(frame_head(1, CONTINUATION, END_HEADERS, [0, 0, 0, 1]));
        wire.push(0);
        assert!(Rewriter::new()
            .pump(&wire[..], &mut Vec::new())
            .await
            .is_err());
    }

    #[test]
    fn big_blocks_are_split_into_continuations() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let block = vec![0x82u8; MAX_FRAME_OUT * 2 + 10];
        let mut out = Vec::new();
        rt.block_on(write_headers(&mut out, END_STREAM, [0, 0, 0, 3], &block))
            .unwrap();
        assert_eq!(out.len(), block.len() + 3 * 9);
        assert_eq!((out[3], out[4]), (HEADERS, END_STREAM));
        let second = 9 + MAX_FRAME_OUT;
        assert_eq!((out[second + 3], out[second + 4]), (CONTINUATION, 0));
        let third = second + 9 + MAX_FRAME_OUT;
        assert_eq!(
            (out[third + 3], out[third + 4]),
            (CONTINUATION, END_HEADERS)
        );
    }
}
