//! The image's `/etc/ld.so.cache`, parsed by the hook's own cache writer: any bytes either are
//! refused or parse into a cache that survives an added library and a write and read back
//! unchanged, and what is written stays within the bound linear in the input
//! (`Cache::output_bound`).
#![no_main]

use devinject_oci::inject::ld_so_cache::{Cache, Library};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut cache) = Cache::parse(data) else {
        return;
    };
    cache.add(&[Library {
        soname: "libfuzz.so.1".into(),
        path: "/usr/lib/libfuzz.so.1".into(),
        flags: 0x0303,
    }]);
    let bytes = cache.to_bytes();
    let added = "libfuzz.so.1".len() + "/usr/lib/libfuzz.so.1".len() + 2;
    assert!(bytes.len() <= Cache::output_bound(data.len(), cache.entries.len(), added));
    let again = Cache::parse(&bytes).expect("our own output parses");
    assert_eq!(again, cache);
    assert!(again.finds_all(&[Library {
        soname: "libfuzz.so.1".into(),
        path: "/usr/lib/libfuzz.so.1".into(),
        flags: 0x0303,
    }]));
});
