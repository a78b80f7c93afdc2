//! deploy/ against the Kubernetes OpenAPI schemas, the kustomize render and the Helm chart,
//! through scripts/check-manifests.py (kubernetes-validate from PyPI, installed into
//! target/manifest-venv by scripts/install-deps.sh; helm from scripts/helm-build.sh). Skipped with a reason when that Python
//! environment is missing, a failure under `CI=true`.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use devinject_tests::skip;

/// A Python that can import kubernetes_validate and yaml.
fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("DEVINJECT_PY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::repo().join("target/manifest-venv"));
    [venv.join("bin/python"), PathBuf::from("python3")]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .args(["-c", "import kubernetes_validate, yaml"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
fn manifests_match_the_kubernetes_schemas_and_render() {
    let py = python();
    if !skip::require(
        py.is_some(),
        "needs kubernetes-validate for Python (scripts/install-deps.sh test installs it)",
    ) {
        return;
    }
    let mut cmd = Command::new(py.expect("checked"));
    cmd.arg(support::repo().join("scripts/check-manifests.py"));
    if skip::in_ci() {
        // Under CI neither the render nor the chart may be skipped.
        cmd.args(["--require-kubectl", "--require-helm"]);
    }
    let out = cmd.output().expect("run check-manifests.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{text}");
    if text.contains("skip ") {
        eprintln!(
            "NOTE: kustomize render skipped (no kubectl with kustomize v4+); files checked only"
        );
    }
}
