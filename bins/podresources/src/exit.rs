//! `devinject-podresources`' exit codes. Keep docs/policy.md in step with this enum.

/// Why `devinject-podresources` exited. With [`ToolExit::Answered`] the answer is on stdout;
/// with any other code stdout is empty and stderr holds the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ToolExit {
    /// The kubelet answered; the answer is on stdout.
    Answered = 0,
    /// A bug or an unexpected failure (the answer could not be written).
    Internal = 1,
    /// Bad command line.
    Usage = 2,
    /// No socket at the configured path, something else there, or it cannot be examined.
    Socket = 3,
    /// Connecting to the socket failed: the kubelet is not listening.
    Connect = 4,
    /// The kubelet answered with an error, or with something that is not an answer.
    Kubelet = 5,
    /// The kubelet did not answer within the timeout.
    Timeout = 6,
}

impl ToolExit {
    /// Every code, in order.
    pub const ALL: [Self; 7] = [
        Self::Answered,
        Self::Internal,
        Self::Usage,
        Self::Socket,
        Self::Connect,
        Self::Kubelet,
        Self::Timeout,
    ];

    /// The numeric code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The exit code `code`, when it is one of ours.
    pub fn from_code(code: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|e| i32::from(e.code()) == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/policy.md's table lists exactly these codes, in order.
    #[test]
    fn docs_list_every_code() {
        let documented = devinject_testkit::docs::table_codes(
            include_str!("../../../docs/policy.md"),
            "- **Exit codes.**",
        );
        let codes: Vec<u8> = ToolExit::ALL.into_iter().map(ToolExit::code).collect();
        assert_eq!(documented, codes);
    }

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for (i, e) in ToolExit::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(e.code()), i);
            assert_eq!(ToolExit::from_code(i32::from(e.code())), Some(e));
        }
        // 7 was "the I/O runtime could not start", gone with the async runtime.
        assert_eq!(ToolExit::from_code(7), None);
        assert_eq!(ToolExit::from_code(127), None);
        assert_eq!(ToolExit::from_code(-1), None);
    }
}
