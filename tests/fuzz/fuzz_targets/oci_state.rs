//! The OCI state a runtime passes on stdin: any bytes parse or fail cleanly, and what parses
//! has a 1.x version and an absolute bundle.
#![no_main]

use devinject_oci::oci::State;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = State::parse(data) {
        assert!(state.oci_version.starts_with("1."));
        assert!(state.bundle.is_absolute());
    }
});
