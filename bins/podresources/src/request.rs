//! `devinject-podresources`' command line.
//!
//! ```text
//! devinject-podresources --socket=PATH --timeout-ms=N --namespace=NS --pod=NAME --container=NAME
//! ```
//!
//! [`Request::to_args`] always writes `--flag=value`, so a value that starts with `-` can never
//! be taken for a flag; by hand, `--flag value` works too.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

/// The usage line the tool prints on `--help` and with a usage error.
pub const USAGE: &str = "usage: devinject-podresources --socket=PATH --timeout-ms=N --namespace=NS --pod=NAME --container=NAME";

const SOCKET: &str = "--socket";
const TIMEOUT_MS: &str = "--timeout-ms";
const NAMESPACE: &str = "--namespace";
const POD: &str = "--pod";
const CONTAINER: &str = "--container";
/// Every flag, in the order [`Request::to_args`] writes them.
const FLAGS: [&str; 5] = [SOCKET, TIMEOUT_MS, NAMESPACE, POD, CONTAINER];

/// One lookup: what the kubelet granted container `container` of pod `namespace/pod`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The kubelet's pod-resources socket.
    pub socket: PathBuf,
    /// The deadline for the whole exchange with the kubelet.
    pub timeout: Duration,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name in the pod spec.
    pub container: String,
}

/// What a command line asks the tool to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// Look a container up.
    Lookup(Request),
    /// Print [`USAGE`].
    Help,
    /// Print the version.
    Version,
}

/// Why a command line was refused (exit code [`crate::ToolExit::Usage`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// Not one of the flags.
    #[error("unknown argument {0:?}")]
    Unknown(String),
    /// A flag at the end of the line without its value.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    /// A flag given twice.
    #[error("{0} is given twice")]
    Repeated(&'static str),
    /// A flag left out.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A name that is not UTF-8.
    #[error("the value of {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// An empty name.
    #[error("the value of {0} is empty")]
    Empty(&'static str),
    /// A timeout that is not a whole number of milliseconds from 1 up.
    #[error("{TIMEOUT_MS} {0:?} is not a number of milliseconds from 1 up")]
    Timeout(String),
}

impl Request {
    /// The arguments after the program name, each `--flag=value`.
    pub fn to_args(&self) -> Vec<OsString> {
        let timeout = self.timeout.as_millis().to_string();
        let values: [&OsStr; 5] = [
            self.socket.as_os_str(),
            OsStr::new(&timeout),
            OsStr::new(&self.namespace),
            OsStr::new(&self.pod),
            OsStr::new(&self.container),
        ];
        FLAGS
            .iter()
            .zip(values)
            .map(|(flag, value)| {
                let mut arg = OsString::from(flag);
                arg.push("=");
                arg.push(value);
                arg
            })
            .collect()
    }

    /// Parses the arguments after the program name.
    pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, UsageError> {
        let mut values: [Option<OsString>; 5] = Default::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                return Ok(Invocation::Help);
            }
            if arg == "--version" {
                return Ok(Invocation::Version);
            }
            let bytes = arg.as_bytes();
            let (name, inline) = match bytes.iter().position(|b| *b == b'=') {
                Some(i) => (&bytes[..i], Some(OsStr::from_bytes(&bytes[i + 1..]))),
                None => (bytes, None),
            };
            let Some(i) = FLAGS.iter().position(|f| f.as_bytes() == name) else {
                return Err(UsageError::Unknown(arg.to_string_lossy().into_owned()));
            };
            let value = match inline {
                Some(v) => v.to_owned(),
                None => args.next().ok_or(UsageError::MissingValue(FLAGS[i]))?,
            };
            if values[i].replace(value).is_some() {
                return Err(UsageError::Repeated(FLAGS[i]));
            }
        }
        let mut take = |i: usize| values[i].take().ok_or(UsageError::Missing(FLAGS[i]));
        let socket = PathBuf::from(take(0)?);
        let timeout = take(1)?;
        let mut name = |i: usize| -> Result<String, UsageError> {
            let v = take(i)?
                .into_string()
                .map_err(|_| UsageError::NotUtf8(FLAGS[i]))?;
            if v.is_empty() {
                return Err(UsageError::Empty(FLAGS[i]));
            }
            Ok(v)
        };
        let (namespace, pod, container) = (name(2)?, name(3)?, name(4)?);
        let ms = timeout
            .to_str()
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .ok_or_else(|| UsageError::Timeout(timeout.to_string_lossy().into_owned()))?;
        if socket.as_os_str().is_empty() {
            return Err(UsageError::Empty(SOCKET));
        }
        Ok(Invocation::Lookup(Request {
            socket,
            timeout: Duration::from_millis(ms),
            namespace,
            pod,
            container,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            timeout: Duration::from_millis(2000),
            namespace: "ml".into(),
            pod: "trainer".into(),
            container: "main".into(),
        }
    }

    fn parse(args: &[&str]) -> Result<Invocation, UsageError> {
        Request::parse_args(args.iter().map(OsString::from))
    }

    #[test]
    fn what_is_written_is_read_back() {
        let r = request();
        let args = r.to_args();
        assert_eq!(
            args,
            [
                "--socket=/var/lib/kubelet/pod-resources/kubelet.sock",
                "--timeout-ms=2000",
                "--namespace=ml",
                "--pod=trainer",
                "--container=main"
            ]
        );
        assert_eq!(Request::parse_args(args), Ok(Invocation::Lookup(r)));
    }

    #[test]
    fn values_that_look_like_flags_stay_values() {
        let r = Request {
            pod: "--container=x".into(),
            container: "-h".into(),
            ..request()
        };
        assert_eq!(Request::parse_args(r.to_args()), Ok(Invocation::Lookup(r)));
    }

    #[test]
    fn separate_values_help_and_version() {
        let got = parse(&[
            "--pod",
            "trainer",
            "--container",
            "main",
            "--namespace",
            "ml",
            "--timeout-ms",
            "2000",
            "--socket",
            "/var/lib/kubelet/pod-resources/kubelet.sock",
        ]);
        assert_eq!(got, Ok(Invocation::Lookup(request())));
        assert_eq!(parse(&["--help"]), Ok(Invocation::Help));
        assert_eq!(parse(&["--pod=x", "--version"]), Ok(Invocation::Version));
    }

    #[test]
    fn bad_lines_are_named() {
        let full = request().to_args();
        let without = |flag: &str| -> Vec<OsString> {
            full.iter()
                .filter(|a| !a.to_string_lossy().starts_with(flag))
                .cloned()
                .collect()
        };
        assert_eq!(
            Request::parse_args(without("--container")),
            Err(UsageError::Missing("--container"))
        );
        let mut twice = full.clone();
        twice.push("--pod=again".into());
        assert_eq!(
            Request::parse_args(twice),
            Err(UsageError::Repeated("--pod"))
        );
        let mut dangling = without("--pod");
        dangling.push("--pod".into());
        assert_eq!(
            Request::parse_args(dangling),
            Err(UsageError::MissingValue("--pod"))
        );
        assert_eq!(
            parse(&["--podd=x"]),
            Err(UsageError::Unknown("--podd=x".into()))
        );
        for bad in ["0", "-1", "2s", ""] {
            let mut args = without("--timeout-ms");
            args.push(format!("--timeout-ms={bad}").into());
            let err = Request::parse_args(args).unwrap_err();
            assert_eq!(err, UsageError::Timeout(bad.into()));
            assert!(err.to_string().contains("--timeout-ms"), "{err}");
        }
        let mut empty = without("--namespace");
        empty.push("--namespace=".into());
        assert_eq!(
            Request::parse_args(empty),
            Err(UsageError::Empty("--namespace"))
        );
        let mut binary = without("--pod");
        binary.push(OsString::from(OsStr::from_bytes(b"--pod=\xff")));
        assert_eq!(
            Request::parse_args(binary),
            Err(UsageError::NotUtf8("--pod"))
        );
    }
}
