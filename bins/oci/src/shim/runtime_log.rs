//! Making the shim's errors visible where engines look for runtime errors.
//!
//! containerd's runc shim (and so docker and Kubernetes) reads the runtime's `--log` file, not
//! its stderr, to tell the user why `create` failed. We append our message there in the same
//! format runc uses (`json`: one object per line with `level` and `msg`), and to stderr.

use std::io::Write;

use super::args::ShimArgs;

/// Reports `msg` as a runtime error.
pub fn report(args: &ShimArgs, msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
    let Some(log) = &args.log else {
        return;
    };
    let line = if args.log_format.as_deref() == Some("json") {
        serde_json::json!({ "level": "error", "msg": msg }).to_string()
    } else {
        format!("level=error msg={msg:?}")
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = writeln!(f, "{line}");
    }
}
