//! The runtime shim in front of the real runc: devices written into config.json (for a restore
//! as for a create), a container asking for nothing left untouched, bad requests refused before
//! runc runs.

use std::path::Path;

use devinject_oci::shim::CONFIG_ENV;
use devinject_tests::bins::bin;
use devinject_tests::probe::Report;
use devinject_tests::runc::{
    container_id, describe, runc_path, shim_command, walkable_tempdir, Bundle,
};
use devinject_tests::sim::{assert_demo_granted_0_1, demo_host, demo_probe_args, SimHost};
use devinject_tests::skip::require_runc_demo;

fn bundle(dir: &Path, host: &SimHost, request: Option<&str>) -> Bundle {
    let args = demo_probe_args();
    let mut b = Bundle::new(&dir.join("bundle"), &args).unwrap();
    if let Some(r) = request {
        b.env(&format!("DEMO_VISIBLE_DEVICES={r}"));
    }
    b.bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    b
}

fn shim_cmd(host: &SimHost, runc: &str) -> Vec<String> {
    shim_command(&host.config, runc)
}

#[test]
fn shim_writes_devices_into_the_spec() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,1"));
    let cmd = shim_cmd(&host, &runc_path());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("shim")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
    // The devices live in the spec, where the runtime re-applies them itself.
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.dir.join("config.json")).unwrap()).unwrap();
    let devs = spec["linux"]["devices"].as_array().unwrap();
    assert!(devs
        .iter()
        .any(|d| d["path"] == "/dev/demo/accel0" && d["major"] == 10 && d["minor"] == 237));
    assert!(
        !devs.iter().any(|d| d["path"] == "/dev/demo/accel2"),
        "accel2 must never be granted"
    );
    let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
    assert!(rules
        .iter()
        .any(|r| r["allow"] == true && r["major"] == 10 && r["minor"] == 234));
}

/// containerd's runtime entry takes no arguments: the configuration can come from the engine's
/// environment (`DEVINJECT_CONFIG`), which the shim inherits; `--config` still wins.
#[test]
fn without_config_the_engine_environment_names_the_configuration() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,1"));
    let shim = bin("devinject-runtime");
    let env = format!("{CONFIG_ENV}={}", host.config.display());
    let runc = runc_path();
    let cmd = ["env", &env, shim.to_str().unwrap(), "--runtime", &runc];
    let out = b.run_with(&cmd, &container_id("shim-env")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&Report::parse(&String::from_utf8_lossy(&out.stdout)), &out);

    // A named --config wins over the environment: a missing one is an error naming it.
    let b = bundle(&t.path().join("second"), &host, Some("0,1"));
    let missing = t.path().join("missing.toml");
    let cmd = [
        "env",
        &env,
        shim.to_str().unwrap(),
        "--config",
        missing.to_str().unwrap(),
        "--runtime",
        &runc,
    ];
    let out = b.run_with(&cmd, &container_id("shim-env")).unwrap();
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing.toml"),
        "{}",
        describe(&out)
    );
}

#[test]
fn nothing_asked_leaves_the_bundle_untouched() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, None);
    b.write().unwrap();
    let before = std::fs::read(b.dir.join("config.json")).unwrap();
    let cmd = shim_cmd(&host, &runc_path());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("noop")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        std::fs::read(b.dir.join("config.json")).unwrap(),
        before,
        "config.json changed"
    );
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(report.node("/dev/demo/accel0").kind, "missing");
    assert_eq!(report.node("/dev/demo/accel2").open, "EPERM");
}

#[test]
fn bad_request_fails_before_runc_and_reaches_the_runtime_log() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,x;y"));
    b.write().unwrap();
    let before = std::fs::read(b.dir.join("config.json")).unwrap();
    let log = t.path().join("log.json");
    let mut cmd = shim_cmd(&host, &runc_path());
    cmd.extend([
        "--log".into(),
        log.to_string_lossy().into_owned(),
        "--log-format".into(),
        "json".into(),
    ]);
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("bad")).unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "request error exit code: {}",
        describe(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("x;y") && err.contains("DEMO_VISIBLE_DEVICES"),
        "{err}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    let line: serde_json::Value = serde_json::from_str(logged.lines().last().unwrap()).unwrap();
    assert_eq!(line["level"], "error");
    assert!(line["msg"].as_str().unwrap().contains("x;y"), "{logged}");
    assert_eq!(
        std::fs::read(b.dir.join("config.json")).unwrap(),
        before,
        "nothing written on failure"
    );
}

/// `runc restore` makes a container from its bundle as `create` does, and CRIU then puts a
/// checkpoint's processes into it: the shim admits and edits a restore's bundle as a create's,
/// so a restored container gets its granted devices back where the checkpoint had them, and a
/// request it may not have is refused before runc runs. runc's restore itself fails here, as
/// it must without a checkpoint (Debian 12's criu 3.17 cannot dump on this kernel: `criu check`
/// stops at "Unexpected rt vDSO area bounds"), so the test stops at what runc was handed and
/// that runc went on to the restore.
#[test]
fn a_restore_is_admitted_and_edited_as_a_create_is() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let images = t.path().join("checkpoint");
    std::fs::create_dir_all(&images).unwrap();
    let restore = |b: &Bundle, id: &str| {
        let cmd = shim_cmd(&host, &runc_path());
        std::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .arg("--root")
            .arg(t.path().join("state"))
            .arg("restore")
            .arg("--image-path")
            .arg(&images)
            .arg("--bundle")
            .arg(&b.dir)
            .arg(id)
            .output()
            .unwrap()
    };
    let granted = bundle(&t.path().join("granted"), &host, Some("0,1"));
    granted.write().unwrap();
    let out = restore(&granted, &container_id("restored"));
    // runc ran the restore, which found no checkpoint to restore (its file descriptors' list
    // is the first thing it reads from the images).
    assert!(!out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("descriptors.json"),
        "runc's restore looked for the checkpoint: {err}"
    );
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(granted.dir.join("config.json")).unwrap()).unwrap();
    let devs = spec["linux"]["devices"]
        .as_array()
        .expect("devices written");
    for (path, minor) in [("/dev/demo/accel0", 237), ("/dev/demo/accel1", 234)] {
        assert!(
            devs.iter()
                .any(|d| d["path"] == path && d["major"] == 10 && d["minor"] == minor),
            "{path} in {devs:?}"
        );
    }
    assert!(!devs.iter().any(|d| d["path"] == "/dev/demo/accel2"));

    let forged = bundle(&t.path().join("forged"), &host, Some("0,x;y"));
    forged.write().unwrap();
    let before = std::fs::read(forged.dir.join("config.json")).unwrap();
    let out = restore(&forged, &container_id("forged"));
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("x;y") && !err.contains("descriptors.json"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(forged.dir.join("config.json")).unwrap(),
        before,
        "nothing written, runc not run"
    );
}

#[test]
fn missing_runtime_is_a_clear_error() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0"));
    let cmd = shim_cmd(&host, "/nonexistent/runc");
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("nort")).unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/runc"),
        "{}",
        describe(&out)
    );
}

/// Regression: in a user namespace runc binds a `linux.devices` node from the host path equal to
/// its container path, so nodes from a dev root other than /dev failed the start. Such nodes are
/// now bind mounts in the spec; the finish hook mounts the files into the mount namespace the
/// user namespace owns.
#[test]
fn user_namespace_nodes_were_bound_from_the_container_path() {
    if !require_runc_demo() {
        return;
    }
    let t = walkable_tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let mut b = bundle(t.path(), &host, Some("0,1"));
    b.user_namespace(100_000, 65_536);
    let cmd = shim_cmd(&host, &runc_path());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("userns")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
}

/// runc also reads `-bundle=B`, `--b B`, `-b=B` and a bundle flag written after the id. A shim that
/// missed them would edit `./config.json` in its working directory while runc ran the unedited
/// bundle. Run from a directory holding a decoy `config.json`, every spelling must inject into the
/// real bundle and leave the decoy alone.
#[test]
fn shim_reads_every_runc_spelling_of_the_bundle() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,1"));
    b.write().unwrap();
    let decoy = t.path().join("decoy");
    std::fs::create_dir_all(&decoy).unwrap();
    let original = std::fs::read(b.dir.join("config.json")).unwrap();
    std::fs::write(decoy.join("config.json"), &original).unwrap();
    let dir = b.dir.to_string_lossy().into_owned();
    let spellings: [Vec<String>; 5] = [
        vec![format!("-bundle={dir}")],
        vec!["--b".into(), dir.clone()],
        vec![format!("-b={dir}")],
        vec!["-bundle".into(), dir.clone()],
        vec![format!("--bundle={dir}")],
    ];
    for (i, spelling) in spellings.iter().enumerate() {
        // A fresh, unedited spec for every start.
        std::fs::write(b.dir.join("config.json"), &original).unwrap();
        let id = container_id("spelling");
        let state = t.path().join(format!("state{i}"));
        let mut cmd = std::process::Command::new(&shim_cmd(&host, &runc_path())[0]);
        cmd.args(&shim_cmd(&host, &runc_path())[1..])
            .arg("--root")
            .arg(&state)
            .arg("run");
        // The last spelling comes after the id, where urfave/cli still reads it.
        if i == spellings.len() - 1 {
            cmd.arg(&id).args(spelling);
        } else {
            cmd.args(spelling).arg(&id);
        }
        let out = cmd.current_dir(&decoy).output().unwrap();
        let _ = std::process::Command::new(runc_path())
            .arg("--root")
            .arg(&state)
            .args(["delete", "--force", &id])
            .output();
        assert!(out.status.success(), "{spelling:?}: {}", describe(&out));
        let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
        assert_demo_granted_0_1(&report, &out);
        assert_eq!(
            std::fs::read(decoy.join("config.json")).unwrap(),
            original,
            "{spelling:?}: the decoy in the working directory was edited"
        );
    }
}

/// A flag's value may begin with `-`: runc runs `run --pid-file --config --bundle B ID` with bundle
/// B and its pid file named `--config`. Run from a directory holding a decoy `config.json`, the
/// shim must inject into B.
#[test]
fn shim_takes_a_flag_value_that_begins_with_a_dash() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let b = bundle(t.path(), &host, Some("0,1"));
    b.write().unwrap();
    let decoy = t.path().join("decoy");
    std::fs::create_dir_all(&decoy).unwrap();
    let original = std::fs::read(b.dir.join("config.json")).unwrap();
    std::fs::write(decoy.join("config.json"), &original).unwrap();
    let id = container_id("dash-value");
    let state = t.path().join("state");
    let shim = shim_cmd(&host, &runc_path());
    let out = std::process::Command::new(&shim[0])
        .args(&shim[1..])
        .arg("--root")
        .arg(&state)
        .args(["run", "--pid-file", "--config", "--bundle"])
        .arg(&b.dir)
        .arg(&id)
        .current_dir(&decoy)
        .output()
        .unwrap();
    let _ = std::process::Command::new(runc_path())
        .arg("--root")
        .arg(&state)
        .args(["delete", "--force", &id])
        .output();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
    assert!(
        decoy.join("--config").is_file(),
        "runc wrote its pid file under the name `--config`"
    );
    assert_eq!(
        std::fs::read(decoy.join("config.json")).unwrap(),
        original,
        "the decoy in the working directory was edited"
    );
}

/// A demo host under `dir` whose profile takes the stable links `demo/by-id/*` (`discovery.links`),
/// each of `links` (name, node) leading to its node; the host and the links' directory.
fn host_with_stable_links(dir: &Path, links: &[(&str, &str)]) -> (SimHost, std::path::PathBuf) {
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    let by_id = host.dev_root.join("demo/by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    for (link, node) in links {
        std::os::unix::fs::symlink(format!("../{node}"), by_id.join(link)).unwrap();
    }
    let profile = host.profiles_dir.join("demo.toml");
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(
        &profile,
        text.replacen(
            "[discovery]\n",
            "[discovery]\nlinks = [\"demo/by-id/*\"]\n",
            1,
        ),
    )
    .unwrap();
    (host, by_id)
}

/// A device's stable link (`discovery.links`) reaches the container on both engine paths of
/// runc: the demo profile given `demo/by-id/*`, where a link leads to accel0 and another to
/// accel2; granted 0 and 1, the container opens accel0 at its link's path too, and accel2's link
/// is absent.
#[test]
fn a_devices_stable_link_is_a_node_at_the_links_path_for_the_hook_and_the_shim() {
    if !require_runc_demo() {
        return;
    }
    let t = walkable_tempdir().unwrap();
    let (host, _) = host_with_stable_links(
        t.path(),
        &[("first-accel", "accel0"), ("third-accel", "accel2")],
    );
    let args = devinject_tests::probe::probe_args(
        &[
            "/dev/demo/accel0",
            "/dev/demo/by-id/first-accel",
            "/dev/demo/by-id/third-accel",
        ],
        &[],
    );
    for path in ["hook", "shim"] {
        let mut b = Bundle::new(&t.path().join(format!("bundle-{path}")), &args).unwrap();
        b.env("DEMO_VISIBLE_DEVICES=0,1");
        let out = if path == "hook" {
            b.hook("createRuntime", &bin("devinject-hook"), &host.config);
            b.run(&container_id("link-hook")).unwrap()
        } else {
            let cmd = shim_cmd(&host, &runc_path());
            let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
            b.run_with(&cmd_refs, &container_id("link-shim")).unwrap()
        };
        assert!(out.status.success(), "{path}: {}", describe(&out));
        let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
        let link = report.node("/dev/demo/by-id/first-accel");
        assert_eq!(
            (
                link.kind.as_str(),
                link.major,
                link.minor,
                link.open.as_str()
            ),
            ("c", 10, 237, "ok"),
            "{path}: accel0 at its link's path"
        );
        assert_eq!(
            report.node("/dev/demo/by-id/third-accel").kind,
            "missing",
            "{path}: the ungranted device's link"
        );
    }
}

/// A node is the device decided for it, not what its host path leads to when it is made: in a
/// user namespace the shim's finish step makes each node as a copy the container owns, and a
/// device's stable link retargeted between the shim's decision and runc's `createRuntime`
/// (here by the runtime the shim runs, a wrapper that points `first-accel` at the ungranted
/// accel2 and then runs the real runc) must not give the container a copy of accel2. The start
/// is refused, naming the link, the device decided and the one found. What this cannot show:
/// a driver renumbering a node in place under the same name, which looks the same to the step.
#[test]
fn a_stable_link_retargeted_after_the_decision_gives_no_other_device() {
    if !require_runc_demo() {
        return;
    }
    let t = walkable_tempdir().unwrap();
    let (host, by_id) = host_with_stable_links(t.path(), &[("first-accel", "accel0")]);
    let wrapper = t.path().join("retargeting-runc");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nln -sfn ../accel2 '{}'\nexec '{}' \"$@\"\n",
            by_id.join("first-accel").display(),
            runc_path()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let args = devinject_tests::probe::probe_args(&["/dev/demo/by-id/first-accel"], &[]);
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0,1");
    b.user_namespace(100_000, 65_536);
    let cmd = shim_cmd(&host, &wrapper.to_string_lossy());
    let cmd_refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd_refs, &container_id("retarget")).unwrap();
    let full = describe(&out);
    assert!(!out.status.success(), "the container started: {full}");
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert!(
        !report
            .nodes
            .values()
            .any(|n| n.major == 10 && n.minor == 235),
        "the container got accel2 (10:235): {full}"
    );
    let failure = devinject_tests::runc::hook_failure(&out)
        .unwrap_or_else(|| panic!("no hook failure: {full}"));
    let line = failure
        .line("devinject")
        .unwrap_or_else(|| panic!("no devinject line: {full}"));
    assert!(
        line.contains("by-id/first-accel is the device c 10:235 now")
            && line.contains("not the device c 10:237 decided")
            && line.contains("start the container again"),
        "{line}"
    );
}
