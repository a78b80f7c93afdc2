//! The real `devinject-device-plugin` binary against gRPC clients that are not built on our own
//! HTTP/2 stack. Two of them, like kubelets before 1.26, send the plugin's socket path as the
//! HTTP/2 `:authority`:
//! - Python grpcio (gRPC C-core, from PyPI), `tests/clients/device_plugin_client.py`;
//! - grpc-java 1.41 on Netty (Debian's packages), `tests/clients/java/DevicePluginClient.java`,
//!   which also reports the `:authority` it wrote on the socket, read back from its own frames.
//!
//! h2 refuses such a request with `PROTOCOL_ERROR`; the plugin's authority rewriter
//! (crates/shared/kubelet/src/authority.rs) must make every call work: `ListAndWatch` lists the devices,
//! `Allocate` answers with the request variable.
//!
//! The third, grpc-go 1.52 or later (Debian 13's packages, built by `scripts/grpc-go-client.sh`),
//! `tests/clients/go/device-plugin-client`, sends `localhost` instead, as kubelets from 1.26 do,
//! and must get the same answers. It reports the grpc-go version it was built with (the test
//! wants 1.52 or later, so it knows which client it ran) and the `:authority` it wrote, decoded
//! from its own frames. The kubelet 1.20 itself (grpc-go 1.27, the socket path) is
//! `tests/tests/cluster/cluster.rs` on Kubernetes 1.20 (`DEVINJECT_KUBE_COMPAT=1 scripts/test.sh`).
//!
//! Needs root (mknod), and what `scripts/install-deps.sh test` makes under `target/`: the grpcio
//! virtualenv `target/grpc-venv` (or `DEVINJECT_GRPC_PYTHON`), the grpc-java client's launcher
//! `target/grpc-java/bin/device-plugin-client` (or `DEVINJECT_GRPC_JAVA_CLIENT`) and a `java`
//! on PATH; and the grpc-go client `target/grpc-go/bin/device-plugin-client` that
//! `scripts/grpc-go-client.sh` builds (or `DEVINJECT_GRPC_GO_CLIENT`; `scripts/test.sh` runs the
//! script first). Skipped otherwise, a failure under CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use devinject_tests::kubelet::fake_kubelet::FakeKubelet;
use devinject_tests::kubelet::host::TestHost;
use devinject_tests::kubelet::plugin_process::PluginProcess;
use devinject_tests::skip::{require, require_root, which};

const SLOW: Duration = Duration::from_secs(20);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    std::env::var_os("DEVINJECT_GRPC_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/grpc-venv/bin/python"))
}

fn java_client() -> PathBuf {
    std::env::var_os("DEVINJECT_GRPC_JAVA_CLIENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/grpc-java/bin/device-plugin-client"))
}

fn go_client() -> PathBuf {
    std::env::var_os("DEVINJECT_GRPC_GO_CLIENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/grpc-go/bin/device-plugin-client"))
}

/// Starts the plugin on two demo devices behind a fake kubelet, runs the command `client` makes
/// for the plugin's socket, and checks its one JSON line: the devices of the first
/// `ListAndWatch` answer, and `Allocate`'s request variable for the first of them. Returns that
/// answer and the socket.
async fn lists_and_allocates(
    name: &str,
    client: impl FnOnce(&Path) -> Command + Send + 'static,
) -> (serde_json::Value, PathBuf) {
    let host = TestHost::new();
    host.add_kind("demo", "", 2, |_| 0);
    let mut kubelet = FakeKubelet::start(&host.kubelet_dir());
    let _plugin = PluginProcess::spawn(&host, &[], &[]);
    let reg = kubelet.next_registration(SLOW).await;
    let socket = host.kubelet_dir().join(&reg.request.endpoint);
    let dialled = socket.clone();
    let out = tokio::task::spawn_blocking(move || client(&dialled).output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("run the {name} client: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the {name} client failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    let answer: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{name} client JSON: {e}: {stdout}\n{stderr}"));
    assert_eq!(
        answer["devices"],
        serde_json::json!(["accel0", "accel1"]),
        "{name}: {answer}"
    );
    assert_eq!(
        answer["envs"]["DEMO_VISIBLE_DEVICES"], "accel0",
        "{name}: Allocate's request variable: {answer}"
    );
    (answer, socket)
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
    let proto = workspace().join("bins/device-plugin/src/api/deviceplugin_v1beta1.proto");
    let client = workspace().join("tests/clients/device_plugin_client.py");
    lists_and_allocates("grpcio", move |socket| {
        let mut command = Command::new(py);
        command
            .arg(client)
            .arg(proto)
            .arg(socket)
            .env("GRPC_VERBOSITY", "ERROR");
        command
    })
    .await;
}

#[tokio::test]
async fn grpc_java_with_a_socket_path_authority_lists_and_allocates() {
    let client = java_client();
    if !(require_root()
        && require(
            which("java").is_some(),
            "needs java (default-jdk-headless; scripts/install-deps.sh test)",
        )
        && require(
            client.exists(),
            &format!(
                "needs the grpc-java client {} (scripts/install-deps.sh test builds it)",
                client.display()
            ),
        ))
    {
        return;
    }
    let (answer, socket) = lists_and_allocates("grpc-java", move |socket| {
        let mut command = Command::new(client);
        command.arg(socket);
        command
    })
    .await;
    // What grpc-java wrote on the socket, not what it was configured with: every request named
    // the socket path, so the rewriter, not a lenient client, made the calls work.
    assert_eq!(
        answer["authorities"],
        serde_json::json!([socket.to_str().expect("a UTF-8 socket path")]),
        "grpc-java's :authority: {answer}"
    );
}

/// The first grpc-go release whose `unix://` targets send `localhost` as `:authority`.
const GRPC_GO_LOCALHOST: (u32, u32) = (1, 52);

#[tokio::test]
async fn grpc_go_with_a_localhost_authority_lists_and_allocates() {
    let client = go_client();
    if !(require_root()
        && require(
            client.exists(),
            &format!(
                "needs the grpc-go client {} (scripts/grpc-go-client.sh builds it)",
                client.display()
            ),
        ))
    {
        return;
    }
    let (answer, _) = lists_and_allocates("grpc-go", move |socket| {
        let mut command = Command::new(client);
        command.arg(socket);
        command
    })
    .await;
    // The grpc-go the client was built with (grpc.Version), so that the test says which client
    // it exercised: an older one would send the socket path, like the clients above.
    let version = answer["grpc_version"].as_str().unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let major_minor = (parts.next().flatten(), parts.next().flatten());
    assert!(
        matches!(major_minor, (Some(major), Some(minor)) if (major, minor) >= GRPC_GO_LOCALHOST),
        "grpc-go {version:?} is older than {}.{}: {answer}",
        GRPC_GO_LOCALHOST.0,
        GRPC_GO_LOCALHOST.1
    );
    // What grpc-go wrote on the socket, not what it was configured with: every request named
    // `localhost`, as a kubelet from 1.26 does.
    assert_eq!(
        answer["authorities"],
        serde_json::json!(["localhost"]),
        "grpc-go's :authority: {answer}"
    );
}
