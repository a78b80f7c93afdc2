//! The shim's command line: any argument list (NUL-separated, not necessarily UTF-8) parses or
//! fails cleanly, and the runtime gets the arguments after our own flags verbatim.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use devinject_oci::shim::args::ShimArgs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let args: Vec<OsString> = data
        .split(|b| *b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    if let Ok(parsed) = ShimArgs::parse(args.clone()) {
        assert!(args.ends_with(&parsed.runtime_args));
        assert_eq!((args.len() - parsed.runtime_args.len()) % 2, 0);
        if parsed.bundle.is_some() {
            assert!(parsed.edits_bundle());
        }
    }
});
