//! The real `devinject-device-plugin` binary against gRPC clients that are not built on our own
//! HTTP/2 stack: Python grpcio (gRPC C-core, from PyPI), which, like kubelets before 1.26 and
//! grpc-java, sends the plugin's socket path as the HTTP/2 `:authority`. h2 refuses such a
//! request with `PROTOCOL_ERROR`; the plugin's authority rewriter (plugin/src/kubelet/authority.rs)
//! must make every call work: `ListAndWatch` lists the devices, `Allocate` answers with the
//! request variable.
//!
//! Needs root (mknod) and the grpcio virtualenv that `scripts/install-deps.sh test` makes under
//! `target/grpc-venv` (or `DEVINJECT_GRPC_PYTHON`); skipped otherwise, a failure under CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use devinject_tests::kubelet::fake_kubelet::FakeKubelet;
use devinject_tests::kubelet::host::TestHost;
use devinject_tests::kubelet::plugin_process::PluginProcess;
use devinject_tests::skip::{require, require_root};

const SLOW: Duration = Duration::from_secs(20);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    std::env::var_os("DEVINJECT_GRPC_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/grpc-venv/bin/python"))
}

#[tokio::test]
async fn python_grpcio_with_a_socket_path_authority_lists_and_allocates() {
    let py = python();
    if !(require_root()
        && require(
            py.exists(),
            &format!(
                "needs {} with grpcio (scripts/install-deps.sh test)",
                py.display()
            ),
        ))
    {
        return;
    }
    let host = TestHost::new();
    host.add_kind("demo", "", 2, |_| 0);
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let _plugin = PluginProcess::spawn(&host, &[], &[]);
    let reg = kubelet.next_registration(SLOW).await;
    let socket = host.kubelet_dir().join(&reg.request.endpoint);
    let proto = workspace().join("plugin/src/api/deviceplugin_v1beta1.proto");
    let client = workspace().join("tests/clients/device_plugin_client.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(client)
            .arg(proto)
            .arg(&socket)
            .env("GRPC_VERBOSITY", "ERROR")
            .output()
            .expect("run the Python client")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the grpcio client failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).expect("client JSON");
    assert_eq!(
        answer["devices"],
        serde_json::json!(["accel0", "accel1"]),
        "{answer}"
    );
    assert_eq!(
        answer["envs"]["DEMO_VISIBLE_DEVICES"], "accel0",
        "Allocate's request variable: {answer}"
    );
}
