//! The multi-arch image (`PLATFORMS=linux/amd64,linux/arm64 scripts/build-image.sh`, named by
//! `DEVINJECT_MULTIARCH_IMAGE`): an OCI image layout archive whose image index has one manifest
//! per platform. Each half's config names its architecture, and its layer holds every shipped
//! binary as a static executable of that machine. Pushed with skopeo to a real registry
//! (Debian's `docker-registry`, the CNCF distribution registry), docker and containerd each pull
//! the half they are asked for, and only that half; CRI-O, asked as the kubelet asks (no
//! platform), pulls the half of the machine it runs on.
//!
//! Seen failing with the index's arm64 manifest carrying the amd64 binaries (the layer check
//! names the first binary of the wrong machine).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use devinject_testkit::{require, require_binary};
use devinject_tests::cluster::free_port;
use devinject_tests::crio::{self, CrioNode};
use devinject_tests::daemons::{poll, run_ok, short_tempdir, Daemon};
use devinject_tests::docker::Engine;

/// What ships, as scripts/lib/shipped.sh lists it: the image's paths of the binaries.
const SHIPPED: [&str; 9] = [
    "usr/bin/devinject-installer",
    "usr/bin/devinject-device-plugin",
    "usr/bin/devinject-nri",
    "usr/bin/devinject-webhook",
    "usr/bin/devinject-dra",
    "usr/share/devinject/bin/devinject-hook",
    "usr/share/devinject/bin/devinject-podresources",
    "usr/share/devinject/bin/devinject-runtime",
    "usr/share/devinject/bin/devinject-ctl",
];

/// The ELF `e_machine` of each platform's architecture.
fn machine(arch: &str) -> u16 {
    match arch {
        "amd64" => 62,
        "arm64" => 183,
        other => panic!("no machine for {other}"),
    }
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().unwrap();
    layout
        .join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

/// Checks the archive's layout and returns each platform's architecture with its manifest's and
/// config's digests.
fn check_layout(archive: &Path, work: &Path) -> BTreeMap<String, (String, String)> {
    let layout = work.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    let mut tar = Command::new("tar");
    tar.arg("-xf").arg(archive).arg("-C").arg(&layout);
    run_ok(tar).unwrap();
    let top = json(&layout.join("index.json"));
    let images = top["manifests"].as_array().unwrap();
    assert_eq!(images.len(), 1, "one image in the layout: {top}");
    assert_eq!(
        images[0]["mediaType"], "application/vnd.oci.image.index.v1+json",
        "the image is an index: {top}"
    );
    let index = json(&blob(&layout, &images[0]));
    let manifests = index["manifests"].as_array().unwrap();
    let mut seen = BTreeMap::new();
    for m in manifests {
        let arch = m["platform"]["architecture"].as_str().unwrap().to_owned();
        assert_eq!(m["platform"]["os"], "linux", "{m}");
        let manifest = json(&blob(&layout, m));
        let config = json(&blob(&layout, &manifest["config"]));
        assert_eq!(config["architecture"], arch.as_str(), "{config}");
        assert_eq!(
            config["config"]["Entrypoint"][0], "/usr/bin/devinject-installer",
            "{config}"
        );
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{manifest}");
        let tree = work.join(&arch);
        std::fs::create_dir_all(&tree).unwrap();
        let mut untar = Command::new("tar");
        untar
            .arg("-xzf")
            .arg(blob(&layout, &layers[0]))
            .arg("-C")
            .arg(&tree);
        run_ok(untar).unwrap();
        for path in SHIPPED {
            let bytes =
                std::fs::read(tree.join(path)).unwrap_or_else(|e| panic!("{arch}: {path}: {e}"));
            assert_eq!(&bytes[..4], b"\x7fELF", "{arch}: {path} is not ELF");
            let e_machine = u16::from_le_bytes([bytes[18], bytes[19]]);
            assert_eq!(
                e_machine,
                machine(&arch),
                "{arch}: {path} is for machine {e_machine}"
            );
            // The loader's name sits in PT_INTERP, within the first page.
            assert!(
                !bytes[..4096.min(bytes.len())]
                    .windows(8)
                    .any(|w| w == b"ld-linux"),
                "{arch}: {path} asks for a dynamic loader"
            );
        }
        seen.insert(
            arch,
            (
                m["digest"].as_str().unwrap().to_owned(),
                manifest["config"]["digest"].as_str().unwrap().to_owned(),
            ),
        );
    }
    assert_eq!(
        seen.keys().map(String::as_str).collect::<Vec<_>>(),
        ["amd64", "arm64"],
        "the index's platforms: {index}"
    );
    seen
}

/// A registry of its own on a free port below `work`, and `archive` pushed to it whole: the
/// registry and the image's reference there.
fn serve(archive: &Path, work: &Path) -> (Daemon, String) {
    let port = free_port().unwrap();
    let config = work.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            work.join("registry").display()
        ),
    )
    .unwrap();
    let mut serve = Command::new("docker-registry");
    serve.arg("serve").arg(&config);
    let registry = Daemon::start("docker-registry", serve, &work.join("registry.log")).unwrap();
    poll(
        "the registry to answer",
        std::time::Duration::from_secs(30),
        || Ok(std::net::TcpStream::connect(("127.0.0.1", port)).ok()),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", registry.log_tail()));
    let reference = format!("127.0.0.1:{port}/devinject:multiarch");
    let mut push = Command::new("skopeo");
    push.args(["copy", "--all", "--dest-tls-verify=false"])
        .arg(format!("oci-archive:{}", archive.display()))
        .arg(format!("docker://{reference}"));
    run_ok(push).unwrap_or_else(|e| panic!("skopeo copy: {e:#}: {}", registry.log_tail()));
    (registry, reference)
}

/// The multi-arch archive, or `None` after saying what is missing (a failure under CI).
fn archive() -> Option<PathBuf> {
    let archive = std::env::var_os("DEVINJECT_MULTIARCH_IMAGE").filter(|v| !v.is_empty());
    (require(
        archive.is_some(),
        "needs DEVINJECT_MULTIARCH_IMAGE, the archive `PLATFORMS=linux/amd64,linux/arm64 \
         scripts/build-image.sh` prints (scripts/test.sh sets it)",
    ) && require_binary("docker-registry")
        && require_binary("skopeo"))
    .then(|| PathBuf::from(archive.expect("checked")))
}

/// The platform architecture of this machine, as image indexes name it.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no image for {other}"),
    }
}

#[test]
fn the_image_index_holds_both_machines_and_each_engine_pulls_its_half() {
    let Some(archive) = archive() else {
        return;
    };
    if !require_binary("dockerd") || !require_binary("ctr") {
        return;
    }
    let work = short_tempdir("mi").unwrap();
    let halves = check_layout(&archive, work.path());

    let (registry, reference) = serve(&archive, work.path());
    // docker (a loopback registry is plain HTTP to it): the image it pulls for each platform is
    // that half's config.
    let engine = Engine::start(&[]).unwrap();
    for (arch, (_, config_digest)) in &halves {
        engine
            .docker_ok(&["pull", "--platform", &format!("linux/{arch}"), &reference])
            .unwrap();
        let inspect = engine
            .docker_ok(&[
                "image",
                "inspect",
                "--format",
                "{{.Id}} {{.Architecture}}",
                &reference,
            ])
            .unwrap();
        assert_eq!(
            inspect.trim(),
            format!("{config_digest} {arch}"),
            "docker pulled another half for linux/{arch}"
        );
        engine.docker_ok(&["image", "rm", &reference]).unwrap();
    }

    // containerd: each namespace pulls one platform; its content store then holds that half's
    // manifest and not the other's.
    for arch in halves.keys() {
        let mut pull = Command::new("ctr");
        pull.arg("--address")
            .arg(engine.containerd_socket())
            .args([
                "-n",
                &format!("pull-{arch}"),
                "images",
                "pull",
                "--plain-http",
            ])
            .args(["--platform", &format!("linux/{arch}"), &reference]);
        run_ok(pull).unwrap_or_else(|e| panic!("ctr pull: {e:#}: {}", registry.log_tail()));
        let mut ls = Command::new("ctr");
        ls.arg("--address").arg(engine.containerd_socket()).args([
            "-n",
            &format!("pull-{arch}"),
            "content",
            "ls",
            "-q",
        ]);
        let content = run_ok(ls).unwrap();
        for (other, (other_manifest, _)) in &halves {
            assert_eq!(
                content.lines().any(|l| l.trim() == other_manifest),
                other == arch,
                "containerd asked for linux/{arch}: the {other} manifest {other_manifest} \
                 must be there only if it is the asked one:\n{content}"
            );
        }
    }
}

/// CRI-O pulls as the kubelet asks it to, with no platform in the request: the half of the
/// machine it runs on, from a registry its `registries.conf` marks plain HTTP.
#[test]
fn crio_pulls_the_half_of_its_own_machine() {
    let Some(archive) = archive() else {
        return;
    };
    let Some(bin) = crio::ready() else {
        return;
    };
    let work = short_tempdir("mc").unwrap();
    let halves = check_layout(&archive, work.path());
    let (registry, reference) = serve(&archive, work.path());
    let location = reference.split('/').next().unwrap().to_owned();
    let mut node = CrioNode::start(
        &bin,
        &crio::Paths {
            plain_http_registry: Some(location),
            ..crio::Paths::default()
        },
    )
    .unwrap();
    node.cri.pull_image(&reference).unwrap_or_else(|e| {
        panic!(
            "{e:#}\n--- crio\n{}\n--- registry\n{}",
            node.log_tail(),
            registry.log_tail()
        )
    });
    let image = node
        .cri
        .image(&reference)
        .unwrap()
        .expect("the pulled image");
    let (_, config) = &halves[host_arch()];
    assert_eq!(
        format!("sha256:{}", image.id),
        *config,
        "CRI-O on {} pulled another half than its own (the index's halves: {halves:?})",
        host_arch()
    );
}
