//! Device profiles: any text parses or fails with an error naming the file; what parses has
//! a valid name and request variable.
#![no_main]

use std::path::Path;

use devinject_devices::{Profile, ProfileName};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Profile::parse(text, Path::new("/p/fuzz.toml")) {
        Ok(p) => {
            assert!(ProfileName::new(p.name.as_str()).is_ok());
            assert!(!p.discovery.nodes.is_empty());
            assert!(devinject_devices::profile::is_env_name(p.request_env()));
        }
        Err(e) => assert!(e.to_string().contains("/p/fuzz.toml")),
    }
});
