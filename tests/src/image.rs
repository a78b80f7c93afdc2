//! Container images built from a rootfs directory, without a registry or a docker daemon, as
//! `docker save` archives: the format `ctr images import` (and `docker load`) reads.
//!
//! An archive holds `manifest.json` (`[{"Config", "RepoTags", "Layers"}]`), the image config
//! and one uncompressed layer tar. The config's `rootfs.diff_ids` must be the layer's sha256,
//! because containerd checks it when it unpacks the layer; it is computed with `sha256sum`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::daemons::run_ok;

/// The `PATH` images get, as docker's and containerd's defaults.
pub const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the image runs by default.
#[derive(Debug, Clone, Default)]
pub struct ImageConfig<'a> {
    pub entrypoint: &'a [&'a str],
    /// The command (arguments to the entrypoint).
    pub cmd: &'a [&'a str],
}

/// The OCI architecture name of this machine.
pub fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Writes a one-layer image of `rootfs`, tagged `tag` (e.g. `devinject.test/busybox:1`), as a
/// docker-save archive at `out`. The layer is written next to `out` once per call.
pub fn docker_archive(
    rootfs: &Path,
    tag: &str,
    config: &ImageConfig<'_>,
    out: &Path,
) -> Result<()> {
    let work = out.with_extension("d");
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let layer = work.join("layer.tar");
    let mut tar = Command::new("tar");
    tar.arg("-C")
        .arg(rootfs)
        .arg("--numeric-owner")
        .arg("-cf")
        .arg(&layer)
        .arg(".");
    run_ok(tar).context("tar the rootfs")?;
    let mut sum = Command::new("sha256sum");
    sum.arg(&layer);
    let digest = run_ok(sum)?
        .split_whitespace()
        .next()
        .map(str::to_owned)
        .context("sha256sum printed nothing")?;
    if digest.len() != 64 {
        bail!("unexpected sha256sum output {digest:?}");
    }
    let image_config = json!({
        "architecture": architecture(),
        "os": "linux",
        "config": {
            "Env": [PATH_ENV],
            "Entrypoint": config.entrypoint,
            "Cmd": config.cmd,
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{digest}")] },
        "history": [{ "created_by": "devinject tests" }],
    });
    std::fs::write(work.join("config.json"), serde_json::to_vec(&image_config)?)
        .context("write the image config")?;
    let manifest = json!([{
        "Config": "config.json",
        "RepoTags": [tag],
        "Layers": ["layer.tar"],
    }]);
    std::fs::write(work.join("manifest.json"), serde_json::to_vec(&manifest)?)
        .context("write manifest.json")?;
    let mut pack = Command::new("tar");
    pack.arg("-C").arg(&work).arg("-cf").arg(out).args([
        "manifest.json",
        "config.json",
        "layer.tar",
    ]);
    run_ok(pack).context("tar the archive")?;
    std::fs::remove_dir_all(&work).with_context(|| format!("remove {}", work.display()))?;
    Ok(())
}
