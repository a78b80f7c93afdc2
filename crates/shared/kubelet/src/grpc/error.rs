//! Why a call has no answer.

use std::io;

use crate::grpc::Code;

/// Why a call has no answer. The caller names the socket and the method; these say what
/// happened on the connection.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum CallError {
    /// Nobody accepted the connection (no socket, or nothing listening on it).
    #[error("cannot connect: {source}")]
    Connect {
        /// The system error.
        source: io::Error,
    },
    /// Reading or writing the connection failed.
    #[error("cannot {step} the connection: {source}")]
    Io {
        /// `read from` or `write to`.
        step: &'static str,
        /// The system error.
        source: io::Error,
    },
    /// The deadline passed first.
    #[error("no answer before the deadline")]
    Timeout,
    /// The server broke HTTP/2 or gRPC framing, or ended the call without an answer.
    #[error("the server's answer is not a gRPC answer: {problem}")]
    Protocol {
        /// What was wrong.
        problem: String,
    },
    /// The answer is larger than the caller accepts.
    #[error("the answer is larger than {limit} bytes")]
    AnswerTooLarge {
        /// The caller's limit.
        limit: usize,
    },
    /// The request does not fit one call (see [`crate::grpc::MAX_REQUEST`]).
    #[error("the request of {size} bytes is larger than {limit} bytes")]
    RequestTooLarge {
        /// The request's size.
        size: usize,
        limit: usize,
    },
    /// The server answered with a gRPC status other than OK.
    #[error("{code:?}: {message}")]
    Status {
        /// The status code.
        code: Code,
        /// The server's message (`grpc-message`, percent-decoded).
        message: String,
    },
}

impl CallError {
    /// A [`CallError::Protocol`] saying `problem`.
    pub(crate) fn protocol(problem: impl Into<String>) -> Self {
        Self::Protocol {
            problem: problem.into(),
        }
    }
}
