//! `config.json` as the hook reads it: any bytes parse or fail cleanly, and the accessors of
//! what parses never panic.
#![no_main]

use std::path::Path;

use devinject_oci::oci::Spec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = Spec::parse(data, "config.json") {
        let _ = spec.rootfs(Path::new("/bundle"));
        let _ = spec.has_user_namespace();
        if let Some(v) = spec.env("DEMO_VISIBLE_DEVICES") {
            assert!(!v.contains('\0') || data.windows(2).any(|w| w == b"\\u"));
        }
    }
});
