//! gRPC's status codes, `grpc-message`'s percent-encoding and the length-prefixed message
//! (the gRPC over HTTP/2 protocol, `PROTOCOL-HTTP2.md`).

use crate::grpc::CallError;

/// The bytes before each message: a compressed flag and a 32-bit big-endian length.
pub(crate) const MESSAGE_PREFIX: usize = 5;

/// A gRPC status code (`grpc-status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 0.
    Ok,
    /// 1.
    Cancelled,
    /// 2: also what a Go server answers for an error it did not give a code.
    Unknown,
    /// 3.
    InvalidArgument,
    /// 4.
    DeadlineExceeded,
    /// 5.
    NotFound,
    /// 6.
    AlreadyExists,
    /// 7.
    PermissionDenied,
    /// 8: the kubelet's pod-resources rate limit answers with it.
    ResourceExhausted,
    /// 9.
    FailedPrecondition,
    /// 10.
    Aborted,
    /// 11.
    OutOfRange,
    /// 12: a method the server does not have.
    Unimplemented,
    /// 13.
    Internal,
    /// 14.
    Unavailable,
    /// 15.
    DataLoss,
    /// 16.
    Unauthenticated,
    /// A number gRPC does not define.
    Other(u32),
}

impl Code {
    /// The code numbered `n`.
    pub fn from_number(n: u32) -> Self {
        const CODES: [Code; 17] = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        usize::try_from(n)
            .ok()
            .and_then(|i| CODES.get(i).copied())
            .unwrap_or(Code::Other(n))
    }

    /// The code in a `grpc-status` value (decimal digits).
    pub(crate) fn parse(value: &[u8]) -> Result<Self, CallError> {
        std::str::from_utf8(value)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u32>().ok())
            .map(Self::from_number)
            .ok_or_else(|| {
                CallError::protocol(format!(
                    "grpc-status {:?} is not a number",
                    String::from_utf8_lossy(value)
                ))
            })
    }
}

/// `grpc-message` as sent: UTF-8 with `%XX` escapes; anything malformed is kept as it came.
pub(crate) fn decode_message(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (value[i], value.get(i + 1), value.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let byte = hex(h).zip(hex(l)).map_or(b'%', |(h, l)| (h * 16 + l) as u8);
                out.push(byte);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `message` with its gRPC prefix (uncompressed).
pub(crate) fn frame_message(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MESSAGE_PREFIX + message.len());
    out.push(0);
    // The caller checked the size against MAX_REQUEST, far below u32::MAX.
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    out
}

/// The one message in an answer's DATA: exactly one uncompressed, length-prefixed message.
pub(crate) fn unframe_answer(body: &[u8]) -> Result<&[u8], CallError> {
    let Some((prefix, message)) = body.split_first_chunk::<MESSAGE_PREFIX>() else {
        return Err(CallError::protocol(format!(
            "the answer has {} bytes, less than a message's prefix",
            body.len()
        )));
    };
    if prefix[0] != 0 {
        return Err(CallError::protocol(
            "the answer is compressed, which the call did not offer",
        ));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    if usize::try_from(len).ok() != Some(message.len()) {
        return Err(CallError::protocol(format!(
            "the answer's prefix says {len} bytes, {} came (a unary answer is one message)",
            message.len()
        )));
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_number() {
        assert_eq!(Code::from_number(0), Code::Ok);
        assert_eq!(Code::from_number(8), Code::ResourceExhausted);
        assert_eq!(Code::from_number(12), Code::Unimplemented);
        assert_eq!(Code::from_number(16), Code::Unauthenticated);
        assert_eq!(Code::from_number(17), Code::Other(17));
        assert_eq!(Code::parse(b"2").unwrap(), Code::Unknown);
        for bad in [&b""[..], b"-1", b"x", b"1 ", b"99999999999"] {
            assert!(Code::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn messages_are_percent_decoded_and_malformed_escapes_kept() {
        assert_eq!(
            decode_message(b"pod %22a%22 not found"),
            "pod \"a\" not found"
        );
        assert_eq!(decode_message(b"100%"), "100%");
        assert_eq!(decode_message(b"%zz%4"), "%zz%4");
        assert_eq!(decode_message(b"%E2%9C%93"), "\u{2713}");
        assert_eq!(decode_message(b"%FF"), "\u{FFFD}");
    }

    #[test]
    fn one_message_is_framed_and_unframed() {
        let framed = frame_message(b"abc");
        assert_eq!(framed, [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(unframe_answer(&framed).unwrap(), b"abc");
        assert_eq!(unframe_answer(&[0, 0, 0, 0, 0]).unwrap(), b"");
    }

    #[test]
    fn answers_that_are_not_one_plain_message_are_refused() {
        for (body, says) in [
            (&[0u8, 0, 0][..], "less than a message's prefix"),
            (&[1, 0, 0, 0, 1, 7], "compressed"),
            (&[0, 0, 0, 0, 2, 7], "prefix says 2 bytes, 1 came"),
            (
                &[0, 0, 0, 0, 1, 7, 0, 0, 0, 0, 0],
                "prefix says 1 bytes, 6 came",
            ),
        ] {
            let e = unframe_answer(body).unwrap_err().to_string();
            assert!(e.contains(says), "{body:?}: {e}");
        }
    }
}
