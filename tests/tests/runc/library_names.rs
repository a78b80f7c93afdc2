//! A profile's `library_names` on the real runc, through the hook and through the shim: by
//! default the library is mounted under its file name with a soname link; with `"soname"` it is
//! mounted under its soname alone, no versioned name beside it. Either way it is read-only, in the
//! linker cache, and a glibc program that needs it by soname runs in the container.

use std::path::Path;

use devinject_tests::cprog::{demo_user, DEMO_USER_OUTPUT};
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::{container_id, describe, Bundle, Via};
use devinject_tests::sim::{demo_host, DEMO_LIB_FILE, DEMO_SONAME, NO_LDCONFIG};
use devinject_tests::skip::require_runc_demo;

/// Starts a container asking for demo device 0 on a host whose demo profile has
/// `library_names = names` (unset when `None`); returns the probe's report of the library's
/// file name and soname in the image's library directory, those two paths, and the
/// container's output.
fn start(dir: &Path, names: Option<&str>, via: Via) -> (Report, [String; 2], std::process::Output) {
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    // The hook writes the cache entry itself: no ldconfig to fall back to.
    host.write_config(NO_LDCONFIG).unwrap();
    if let Some(v) = names {
        host.set_profile_key("demo", "library_names", &format!("{v:?}"))
            .unwrap();
    }
    let mut b = Bundle::new(&dir.join("bundle"), &["/bin/true"]).unwrap();
    let lib_dir = demo_user(&b.rootfs(), &host.demo_library()).unwrap();
    let [file, soname] =
        [DEMO_LIB_FILE, DEMO_SONAME].map(|n| lib_dir.join(n).display().to_string());
    let probe = probe_args(&[], &[&file, &soname]).join(" ");
    b.args(&["/bin/sh", "-c", &format!("{probe} && /usr/bin/demo-user")]);
    b.env("DEMO_VISIBLE_DEVICES=0");
    let out = b
        .run_via(via, &host.config, &container_id("libnames"))
        .unwrap();
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    (report, [file, soname], out)
}

#[test]
fn soname_names_mount_each_library_once_under_its_soname_and_it_loads() {
    if !require_runc_demo() {
        return;
    }
    for via in [Via::Hook, Via::Shim] {
        for names in [None, Some("file"), Some("soname")] {
            let t = tempfile::tempdir().unwrap();
            let (report, [file, soname], out) = start(t.path(), names, via);
            let ctx = format!("{via:?}, library_names {names:?}: {}", describe(&out));
            assert!(out.status.success(), "{ctx}");
            let (file, soname) = (report.lib(&file), report.lib(&soname));
            assert!(soname.present && soname.read_only, "{ctx}");
            assert!(soname.in_ldcache, "the soname must be in the cache: {ctx}");
            if names == Some("soname") {
                assert!(!file.present, "no versioned file name beside it: {ctx}");
            } else {
                assert!(file.present && file.read_only, "{ctx}");
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.lines().any(|l| l == DEMO_USER_OUTPUT),
                "the program needing libdemo.so.1 must run: {ctx}"
            );
        }
    }
}
