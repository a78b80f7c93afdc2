//! The devinject image as users get it: scripts/build-image.sh on a private docker engine (its
//! FROM scratch Dockerfile, the static binaries), saved as an archive for the node's containerd
//! (no registry here).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::docker::Engine;
use crate::runc::describe;

/// Builds the image with scripts/build-image.sh, in the profile its `PROFILE` names (release
/// unless set; scripts/test.sh sets dev, whose binaries release-build.sh strips: unstripped, the
/// installer reading them would go past its memory limit), and saves it to
/// `dir/devinject-image.tar`; returns the archive and the image's tag.
pub fn build(dir: &Path) -> Result<(PathBuf, String)> {
    let engine = Engine::start(&[])?;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docker = engine.docker_command();
    let docker_cmd = std::iter::once(docker.get_program())
        .chain(docker.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut build = Command::new(workspace.join("scripts/build-image.sh"));
    build
        .env("DOCKER", docker_cmd)
        .envs(docker.get_envs().filter_map(|(k, v)| Some((k, v?))));
    let out = build.output().context("run scripts/build-image.sh")?;
    if !out.status.success() {
        bail!("scripts/build-image.sh failed: {}", describe(&out));
    }
    let tag = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .context("build-image.sh printed no tag")?
        .trim()
        .to_owned();
    let archive = dir.join("devinject-image.tar");
    engine.docker_ok(&["save", "-o", &archive.display().to_string(), &tag])?;
    Ok((archive, tag))
}
