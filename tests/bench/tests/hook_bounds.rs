//! The hook's work on an image's linker cache is bounded by the cache's size (a 59 MiB cache once
//! took 2.9 GiB and wrote 685 MiB). The real hook, as runc's createRuntime hook, merges the demo
//! library into caches of growing size; its peak RSS (its own and its children's, through
//! `devinject-bench time`) and the cache it writes stay within bounds linear in the input. Time is
//! measured by scripts/bench.sh, not here.

use std::path::Path;

use devinject_bench::timer::read_records;
use devinject_oci::inject::ld_so_cache::{Cache, Entry};
use devinject_tests::bins::bin;
use devinject_tests::runc::{container_id, describe, Bundle};
use devinject_tests::sim::demo_host;
use devinject_tests::skip::require_runc_demo;
use serde_json::json;

/// Peak RSS may grow by at most this many times the cache's size (measured: about 5.5 on the
/// largest cache accepted, release build; the test binaries are debug builds).
const RSS_PER_INPUT_BYTE: u64 = 8;

/// A valid cache of `n` entries, one soname and path each, as in a real cache.
fn cache(n: usize) -> Vec<u8> {
    let entries = (0..n)
        .map(|i| Entry {
            flags: 0x0303,
            name: format!("libbound{i}.so.1").into_bytes(),
            path: format!("/usr/lib/x86_64-linux-gnu/libbound{i}.so.1").into_bytes(),
            hwcap: 0,
        })
        .collect();
    Cache {
        entries,
        hwcaps: Vec::new(),
    }
    .to_bytes()
}

/// Starts a container asking for one demo device with `file` as its linker cache; returns the
/// hook's peak RSS in bytes and the cache it left.
fn run(dir: &Path, config: &Path, file: &[u8]) -> (u64, Vec<u8>) {
    let record = dir.join("hook.rec");
    let _ = std::fs::remove_file(&record);
    let mut b = Bundle::new(&dir.join("bundle"), &["/bin/true".to_owned()]).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0");
    std::fs::write(b.rootfs().join("etc/ld.so.cache"), file).unwrap();
    b.push_hook(
        "createRuntime",
        json!({
            "path": env!("CARGO_BIN_EXE_devinject-bench"),
            "args": ["devinject-bench", "time", "--record", record, "--",
                     bin("devinject-hook"), "--config", config],
            "env": [],
            "timeout": 120,
        }),
    );
    let out = b.run(&container_id("bounds")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let rec = read_records(&record).unwrap();
    assert_eq!(rec.len(), 1, "one hook run recorded");
    assert_eq!(rec[0].code, 0);
    let written = std::fs::read(b.rootfs().join("etc/ld.so.cache")).unwrap();
    std::fs::remove_dir_all(dir.join("bundle")).unwrap();
    (rec[0].max_rss_kib * 1024, written)
}

#[test]
fn peak_rss_and_the_written_cache_grow_linearly_with_the_image_cache() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let sim = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let (base, _) = run(t.path(), &sim.config, &cache(16));
    for n in [20_000, 150_000] {
        let file = cache(n);
        let (rss, written) = run(t.path(), &sim.config, &file);
        let parsed = Cache::parse(&written).expect("the hook wrote a cache we read");
        assert_eq!(parsed.entries.len(), n + 1, "the demo library was added");
        // The demo library's soname and path, with their NULs.
        let added = "libdemo.so.1".len() + "/usr/lib/libdemo.so.1".len() + 2;
        let bound = Cache::output_bound(file.len(), n + 1, added);
        assert!(
            written.len() <= bound,
            "{n} entries: wrote {} bytes from {} (bound {bound})",
            written.len(),
            file.len()
        );
        let rss_bound = base + RSS_PER_INPUT_BYTE * file.len() as u64;
        eprintln!(
            "{n} entries, {} KiB cache: peak RSS {} KiB (base {} KiB, bound {} KiB)",
            file.len() >> 10,
            rss >> 10,
            base >> 10,
            rss_bound >> 10
        );
        assert!(
            rss <= rss_bound,
            "{n} entries: peak RSS {rss} > {rss_bound} ({} bytes of cache)",
            file.len()
        );
    }
}
