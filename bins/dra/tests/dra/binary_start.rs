//! The driver's binary as a build that links both of rustls's providers makes it: it must reach
//! its API server client and go on to its configuration, not stop at the client.

use std::process::Command;

#[test]
fn with_both_tls_providers_linked_the_driver_makes_its_client_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // A server nothing listens on: the client is made without a connection.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
         current-context: x\n",
    )
    .unwrap();
    let missing = dir.path().join("no-profiles");
    let out = Command::new(env!("CARGO_BIN_EXE_devinject-dra"))
        .arg("--node-name=node-a")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--profiles-dir")
        .arg(&missing)
        .arg("--metrics-address=off")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "the driver panicked:\n{stderr}"
    );
    // Past the client: the profiles directory is the first thing read after it (exit code 3, a
    // configuration mistake).
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&*missing.to_string_lossy()), "{stderr}");
}
