//! A containerd with the CRI plugin set up as a Kubernetes node's runtime, shared by the CRI
//! tests (tests/tests/suite/containerd_cri.rs and tests/tests/suite/containerd_cdi.rs, driving it as the kubelet would)
//! and the cluster tier ([`crate::cluster`], driven by a real kubelet): its configuration, the
//! `devinject` runtime entry written by `devinject-ctl`, or CDI on with the specs `devinject-ctl
//! cdi generate` writes, and the test images (busybox with the probe, and a pause image from the
//! same rootfs).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::bins::bin;
use crate::cri::Cri;
use crate::daemons::{run_ok, Containerd};
use crate::image::{docker_archive, ImageConfig};
use crate::sim::SimHost;
use crate::skip::which;

/// The CRI plugin's name in containerd's configuration.
pub const CRI: &str = "io.containerd.grpc.v1.cri";
/// The image the probe containers run.
pub const BUSYBOX: &str = "devinject.test/busybox:1";
/// The pod sandbox image.
pub const PAUSE: &str = "devinject.test/pause:1";
/// The runtime handler devinject-ctl registers (a RuntimeClass's `handler`).
pub const HANDLER: &str = "devinject";
/// containerd's namespace for the CRI plugin's images.
pub const K8S_NAMESPACE: &str = "k8s.io";

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// containerd's main configuration: private paths, the CRI settings this machine needs, and a
/// plain runc runtime for devinject-ctl to copy.
pub fn containerd_config(dir: &Path) -> String {
    format!(
        "version = 2\n{private}\n\
         [plugins.\"{CRI}\"]\n  sandbox_image = \"{PAUSE}\"\n  restrict_oom_score_adj = true\n  \
         stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n  \
         [plugins.\"{CRI}\".cni]\n    bin_dir = \"{d}/cni/bin\"\n    conf_dir = \"{d}/cni/conf\"\n  \
         [plugins.\"{CRI}\".containerd]\n    default_runtime_name = \"runc\"\n    \
         [plugins.\"{CRI}\".containerd.runtimes.runc]\n      runtime_type = \"io.containerd.runc.v2\"\n      \
         [plugins.\"{CRI}\".containerd.runtimes.runc.options]\n        Root = \"{d}/runc\"\n        \
         BinaryName = \"{runc}\"\n",
        private = Containerd::private_settings(dir),
        d = dir.display(),
        runc = path_str(&crate::runc::runc_binary().expect("runc on PATH")),
    )
}

/// [`containerd_config`] with CDI on in the CRI plugin (`enable_cdi = true`), reading the specs
/// in `spec_dir` (`cdi_spec_dirs`): for containerd 1.7, and for 2.x, which moves the settings to
/// its runtime plugin when it reads a version 2 file. The machine's containerd 1.6 has no CDI.
pub fn containerd_cdi_config(dir: &Path, spec_dir: &Path) -> String {
    let table = format!("[plugins.\"{CRI}\"]\n");
    containerd_config(dir).replacen(
        &table,
        &format!(
            "{table}  enable_cdi = true\n  cdi_spec_dirs = [\"{}\"]\n",
            path_str(spec_dir)
        ),
        1,
    )
}

/// The NRI settings to append to a containerd configuration in `dir`: NRI on (1.7 has it off
/// by default), its socket `dir/nri.sock` ([`nri_socket`]), and private plugin directories.
pub fn containerd_nri_settings(dir: &Path) -> String {
    containerd_nri_settings_on(dir, &nri_socket(dir))
}

/// [`containerd_nri_settings`] with the NRI socket at `socket` instead (a path in the
/// namespace containerd runs in).
pub fn containerd_nri_settings_on(dir: &Path, socket: &Path) -> String {
    format!(
        "\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  \
         socket_path = \"{}\"\n  plugin_path = \"{d}/nri-plugins\"\n  \
         plugin_config_path = \"{d}/nri-conf\"\n",
        path_str(socket),
        d = dir.display(),
    )
}

/// NRI off, to append to the configuration of a containerd release that is not to serve it:
/// containerd 2 has it on by default, on the host's `/var/run/nri/nri.sock`.
pub const CONTAINERD_NRI_OFF: &str = "\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n";

/// The NRI socket of a containerd in `dir` configured with [`containerd_nri_settings`].
pub fn nri_socket(dir: &Path) -> std::path::PathBuf {
    dir.join("nri.sock")
}

/// `devinject-ctl cdi generate` of `host`'s profiles and devices into `output`, each device's
/// edits ending with the `createRuntime` hook `devinject-hook finish` (the built hook, on
/// `host`'s config) for the files and the linker cache; returns what it printed.
pub fn cdi_generate(host: &SimHost, output: &Path) -> Result<String> {
    cdi_generate_with(host, output, &[])
}

/// [`cdi_generate`] with `args` added (e.g. `--user-namespaces`).
pub fn cdi_generate_with(host: &SimHost, output: &Path, args: &[&str]) -> Result<String> {
    let mut generate = Command::new(bin("devinject-ctl"));
    generate
        .args(["cdi", "generate", "--output"])
        .arg(output)
        .arg("--profiles-dir")
        .arg(&host.profiles_dir)
        .arg("--dev-root")
        .arg(&host.dev_root)
        .arg("--sys-root")
        .arg(host.dir.join("sys"))
        .arg("--driver-root")
        .arg(&host.driver_root)
        .arg("--hook-path")
        .arg(bin("devinject-hook"))
        .arg("--hook-config")
        .arg(&host.config)
        .args(args);
    run_ok(generate).context("devinject-ctl cdi generate")
}

/// `devinject-ctl runtime configure --runtime containerd --mode <mode>` on `config`. In `shim`
/// mode the runtime entry names a script that passes `--config` to the real shim (containerd's
/// `BinaryName` takes no arguments); [`configure_shim_env`] does without it.
pub fn configure(root: &Path, config: &Path, host: &SimHost, mode: &str) {
    if mode == "shim" {
        let wrapper = root.join("bin/devinject-runtime");
        std::fs::create_dir_all(wrapper.parent().expect("parent")).expect("mkdir");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec '{}' --config '{}' \"$@\"\n",
                path_str(&bin("devinject-runtime")),
                path_str(&host.config)
            ),
        )
        .expect("write wrapper");
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        return configure_shim_at(config, &wrapper);
    }
    let mut cmd = ctl_configure(config, mode);
    cmd.arg("--hook-path")
        .arg(bin("devinject-hook"))
        .arg("--hook-config")
        .arg(&host.config)
        .arg("--ctr")
        .arg(which("ctr").expect("ctr"));
    let out = run_ok(cmd).expect("devinject-ctl runtime configure");
    assert!(out.contains("create"), "{out}");
}

/// The shim's runtime entry naming the built `devinject-runtime` itself, as an install does:
/// containerd must then be started with [`SHIM_CONFIG_ENV`] pointing at the host configuration
/// (what the default path `/etc/devinject/config.toml` is on a real node).
pub fn configure_shim_env(config: &Path) {
    configure_shim_at(config, &bin("devinject-runtime"));
}

/// The variable the shim reads its configuration's path from when `--config` is not given.
pub use devinject_oci::shim::CONFIG_ENV as SHIM_CONFIG_ENV;

fn configure_shim_at(config: &Path, shim: &Path) {
    let mut cmd = ctl_configure(config, "shim");
    cmd.arg("--shim-path").arg(shim);
    let out = run_ok(cmd).expect("devinject-ctl runtime configure");
    assert!(out.contains("create"), "{out}");
}

fn ctl_configure(config: &Path, mode: &str) -> Command {
    let mut cmd = Command::new(bin("devinject-ctl"));
    cmd.args([
        "runtime",
        "configure",
        "--runtime",
        "containerd",
        "--mode",
        mode,
    ])
    .arg("--config")
    .arg(config);
    cmd
}

/// Builds the busybox and pause images from one rootfs and imports them for the CRI plugin.
pub fn import_images(
    root: &Path,
    containerd: &Containerd,
    cri: &mut Cri,
    image: Option<fn(&Path) -> Result<()>>,
) {
    for (tag, archive) in test_image_archives(root, image).expect("image archives") {
        containerd
            .import(K8S_NAMESPACE, &archive)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", containerd.log_tail()));
        cri.wait_image(tag).expect("image visible to CRI");
    }
}

/// [`BUSYBOX`] and [`PAUSE`] from one busybox rootfs in `root`, to which `image` adds when
/// given, as docker-save archives there: each tag and its archive.
pub fn test_image_archives(
    root: &Path,
    image: Option<fn(&Path) -> Result<()>>,
) -> Result<Vec<(&'static str, PathBuf)>> {
    let rootfs = root.join("image-rootfs");
    crate::rootfs::busybox(&rootfs).context("busybox rootfs")?;
    if let Some(add) = image {
        add(&rootfs).context("the test's additions to the image")?;
    }
    let images = [
        (
            BUSYBOX,
            ImageConfig {
                entrypoint: &[],
                cmd: &["/bin/sh"],
            },
        ),
        (
            PAUSE,
            ImageConfig {
                entrypoint: &["/bin/sleep", "infinity"],
                cmd: &[],
            },
        ),
    ];
    let mut out = Vec::new();
    for (i, (tag, config)) in images.iter().enumerate() {
        let archive = root.join(format!("image{i}.tar"));
        docker_archive(&rootfs, tag, config, &archive).context("image archive")?;
        out.push((*tag, archive));
    }
    Ok(out)
}
