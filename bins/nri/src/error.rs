//! Why the NRI plugin failed.

/// An error of the NRI session.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// The socket failed.
    #[error("{0}: {1}")]
    Io(&'static str, #[source] std::io::Error),
    /// containerd sent something NRI does not allow.
    #[error("NRI protocol: {0}")]
    Protocol(String),
    /// containerd refused the registration.
    #[error("containerd refused to register the plugin: {0} (is another plugin registered with the same index and name?)")]
    Refused(String),
    /// A message did not decode.
    #[error("NRI protocol: cannot decode {what}: {source}")]
    Decode {
        /// The message.
        what: &'static str,
        source: prost::DecodeError,
    },
}
