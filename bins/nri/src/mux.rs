//! NRI's connection multiplexing: one unix socket (the trunk) carries two byte streams, the
//! plugin's service (connection 1: containerd calls the plugin) and the runtime's service
//! (connection 2: the plugin calls containerd). Each frame on the trunk is the connection id
//! and the payload length (both big-endian `u32`) and then that many bytes of the connection's
//! stream.

use std::io::{Read, Write};

use crate::error::NriError;

/// The connection containerd calls the plugin's service on.
pub const PLUGIN_SERVICE: u32 = 1;
/// The connection the plugin calls containerd's service on.
pub const RUNTIME_SERVICE: u32 = 2;
/// The largest frame payload accepted: a ttrpc header and its largest message.
pub const MAX_FRAME: usize = 10 + (4 << 20);

/// The largest frame payload written. The runtime's side hands each frame whole to one `Read`
/// of its connection and fails the read (`ENOMEM`, then closes the plugin) when the reader's
/// buffer is smaller; ttrpc reads each message's header through a 4096-byte `bufio.Reader`
/// (containerd/nri `multiplex.conn.Read`, containerd/ttrpc `newChannel`). A response over
/// 4096 bytes in one frame (the nvidia profile's graphics part: 4948 bytes) made containerd
/// drop the plugin and create the container without its devices.
pub const WRITE_FRAME: usize = 4096;

/// Reads one frame: `(connection id, payload)`. `Ok(None)` at a clean end of the trunk.
pub fn read_frame(trunk: &mut impl Read) -> Result<Option<(u32, Vec<u8>)>, NriError> {
    let mut header = [0u8; 8];
    match trunk.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(NriError::Io("read from the NRI socket", e)),
    }
    let conn = u32::from_be_bytes(header[..4].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(header[4..].try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME {
        return Err(NriError::Protocol(format!(
            "a frame of {len} bytes on connection {conn}, more than NRI's {MAX_FRAME}"
        )));
    }
    let mut payload = vec![0u8; len];
    trunk
        .read_exact(&mut payload)
        .map_err(|e| NriError::Io("read from the NRI socket", e))?;
    Ok(Some((conn, payload)))
}

/// Writes `bytes` to connection `conn`, in frames of at most [`WRITE_FRAME`] bytes.
pub fn write_frames(trunk: &mut impl Write, conn: u32, bytes: &[u8]) -> Result<(), NriError> {
    let mut out = Vec::with_capacity(bytes.len() + 8 * (bytes.len() / WRITE_FRAME + 1));
    for chunk in bytes.chunks(WRITE_FRAME) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    trunk
        .write_all(&out)
        .map_err(|e| NriError::Io("write to the NRI socket", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_are_written_at_most_4096_bytes_long() {
        let big = vec![7u8; 2 * WRITE_FRAME + 5];
        let mut wire = Vec::new();
        write_frames(&mut wire, RUNTIME_SERVICE, b"abc").unwrap();
        write_frames(&mut wire, PLUGIN_SERVICE, &big).unwrap();
        let mut r = wire.as_slice();
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some((RUNTIME_SERVICE, b"abc".to_vec()))
        );
        let mut sizes = Vec::new();
        while let Some((c, payload)) = read_frame(&mut r).unwrap() {
            assert_eq!(c, PLUGIN_SERVICE);
            sizes.push(payload.len());
        }
        assert_eq!(sizes, [4096, 4096, 5]);
    }

    #[test]
    fn a_frame_up_to_the_ttrpc_limit_is_read() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&PLUGIN_SERVICE.to_be_bytes());
        wire.extend_from_slice(&(MAX_FRAME as u32).to_be_bytes());
        wire.resize(wire.len() + MAX_FRAME, 1);
        let (_, payload) = read_frame(&mut wire.as_slice()).unwrap().unwrap();
        assert_eq!(payload.len(), MAX_FRAME);
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&1u32.to_be_bytes());
        wire.extend_from_slice(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert!(matches!(
            read_frame(&mut wire.as_slice()),
            Err(NriError::Protocol(_))
        ));
        let mut cut = Vec::new();
        write_frames(&mut cut, 1, b"abcdef").unwrap();
        cut.truncate(10);
        assert!(read_frame(&mut cut.as_slice()).is_err());
    }
}
