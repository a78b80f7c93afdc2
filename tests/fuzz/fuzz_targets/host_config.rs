//! The host config file: any text parses or fails with an error naming the file.
#![no_main]

use std::path::Path;

use devinject_hostconfig::HostConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match HostConfig::parse(text, Path::new("/etc/devinject/config.toml")) {
        Ok(c) => assert!(
            c.pod_resources_timeout_ms > 0
                && (1..=devinject_hostconfig::MAX_NRI_REQUEST_BUDGET_MS)
                    .contains(&c.nri_request_budget_ms)
        ),
        Err(e) => assert!(e.to_string().contains("/etc/devinject/config.toml")),
    }
});
