//! The shipped nvidia-jetson profile on simulated Jetson hosts, one per L4T layout: r32
//! (JetPack 4, the driver in `/usr/lib/aarch64-linux-gnu/tegra`) and r36 (JetPack 6, the driver
//! in `.../nvidia` with `tegra` a link to it, the nvgpu nodes under both of the driver's names).
//! Each host holds what NVIDIA's container CSV files of that release list (the profile's
//! comments name them) and a few files the profile must leave alone. The nodes are made with
//! mknod (needs root); the driver files are plain files, which is all their resolution reads.

use devinject_testkit::nodes::mknod_char;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use devinject_devices::{
    plan, Capabilities, ContainerLayout, DriverFiles, HostRoots, MountKind, PlanInput, Profile,
    Request, Resolve,
};
use devinject_discovery::{
    discover, profile_dir, profile_file, resolve_driver_files, DiscoveryError,
};

/// The profile as shipped.
fn shipped() -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles/nvidia-jetson.toml");
    profile_file::load(&path).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// L4T r32.7 (JetPack 4) on a Xavier.
    R32,
    /// L4T r36 (JetPack 6) on an Orin.
    R36,
}

/// nvgpu's and host1x's majors are dynamic: any unused ones will do. nvmap is a misc device.
const NVGPU: u32 = 507;
const HOST1X: u32 = 508;
const MISC: u32 = 10;
const NVIDIA: u32 = 195;

/// The device nodes of a board of `release`: name, major, minor. The GPU's channel node is
/// `nvhost-gpu`, minor 0.
fn nodes(release: Release) -> Vec<(String, u32, u32)> {
    let mut v = vec![
        ("nvhost-gpu", NVGPU, 0),
        ("nvhost-ctrl-gpu", NVGPU, 1),
        ("nvhost-as-gpu", NVGPU, 2),
        ("nvhost-dbg-gpu", NVGPU, 3),
        ("nvhost-prof-gpu", NVGPU, 4),
        ("nvmap", MISC, 62),
        ("nvhost-ctrl-nvdla0", HOST1X, 20),
        ("nvhost-ctrl-nvdla1", HOST1X, 21),
    ];
    match release {
        Release::R32 => v.extend([
            ("nvhost-ctrl", HOST1X, 0),
            ("nvhost-vic", HOST1X, 1),
            ("nvhost-nvdec", HOST1X, 2),
            ("nvhost-msenc", HOST1X, 3),
            // The display controller's: not the profile's.
            ("tegra_dc_0", 509, 0),
        ]),
        Release::R36 => v.extend([
            ("nvhost-ctxsw-gpu", NVGPU, 5),
            ("nvhost-prof-ctx-gpu", NVGPU, 6),
            ("nvhost-prof-dev-gpu", NVGPU, 7),
            ("nvhost-power-gpu", NVGPU, 8),
            ("nvhost-sched-gpu", NVGPU, 9),
            ("nvhost-nvsched-gpu", NVGPU, 10),
            ("nvhost-tsg-gpu", NVGPU, 11),
            ("host1x-fence", HOST1X, 0),
            ("nvidiactl", NVIDIA, 255),
            ("nvidia0", NVIDIA, 0),
            ("nvidia-modeset", NVIDIA, 254),
            // The V4L2 decoder's: not the profile's.
            ("v4l2-nvdec", 81, 0),
        ]),
    }
    let mut v: Vec<(String, u32, u32)> = v
        .into_iter()
        .map(|(name, major, minor)| (name.to_owned(), major, minor))
        .collect();
    if release == Release::R36 {
        for (minor, name) in (32..).zip(V2_NAMES) {
            v.push((format!("nvgpu/igpu0/{name}"), NVGPU, minor));
        }
    }
    v
}

/// The names nvgpu gives its nodes under `nvgpu/igpu0/` (r35 and later).
const V2_NAMES: [&str; 12] = [
    "as", "channel", "ctrl", "ctxsw", "dbg", "nvsched", "power", "prof", "prof-ctx", "prof-dev",
    "sched", "tsg",
];

/// The control nodes the profile must give a container on `release`, in the profile's order.
fn want_control_nodes(release: Release) -> Vec<String> {
    let names: Vec<String> = match release {
        Release::R32 => [
            "nvhost-ctrl-gpu",
            "nvhost-as-gpu",
            "nvhost-dbg-gpu",
            "nvhost-prof-gpu",
            "nvmap",
            "nvhost-ctrl",
            "nvhost-vic",
            "nvhost-nvdec",
            "nvhost-msenc",
            "nvhost-ctrl-nvdla0",
            "nvhost-ctrl-nvdla1",
        ]
        .map(String::from)
        .to_vec(),
        Release::R36 => [
            "nvhost-ctrl-gpu",
            "nvhost-as-gpu",
            "nvhost-dbg-gpu",
            "nvhost-prof-gpu",
            "nvhost-ctxsw-gpu",
            "nvhost-prof-ctx-gpu",
            "nvhost-prof-dev-gpu",
            "nvhost-power-gpu",
            "nvhost-sched-gpu",
            "nvhost-nvsched-gpu",
            "nvhost-tsg-gpu",
        ]
        .into_iter()
        .map(String::from)
        .chain(V2_NAMES.iter().map(|n| format!("nvgpu/igpu0/{n}")))
        .chain(
            [
                "nvmap",
                "host1x-fence",
                "nvhost-ctrl-nvdla0",
                "nvhost-ctrl-nvdla1",
                "nvidiactl",
                "nvidia0",
                "nvidia-modeset",
            ]
            .map(String::from),
        )
        .collect(),
    };
    names.into_iter().map(|n| format!("/dev/{n}")).collect()
}

/// The directory the release's BSP puts its libraries in.
fn lib_dir(release: Release) -> &'static str {
    match release {
        Release::R32 => "usr/lib/aarch64-linux-gnu/tegra",
        Release::R36 => "usr/lib/aarch64-linux-gnu/nvidia",
    }
}

/// The release's driver files under its library directory: the libraries the profile must
/// find, and the camera stack's `libnvargus.so`, which it must leave.
fn driver_files(release: Release) -> Vec<&'static str> {
    let mut files = want_libraries(release);
    files.push("libnvargus.so");
    files
}

/// The release's links under its library directory (name, target), as the BSP's packages and
/// ldconfig leave them.
fn driver_links(release: Release) -> Vec<(&'static str, &'static str)> {
    match release {
        Release::R32 => vec![
            ("libcuda.so", "libcuda.so.1.1"),
            ("libcuda.so.1", "libcuda.so.1.1"),
            (
                "libnvidia-ptxjitcompiler.so.1",
                "libnvidia-ptxjitcompiler.so.440.18",
            ),
        ],
        Release::R36 => vec![
            ("libcuda.so", "libcuda.so.1"),
            ("libcuda.so.1", "libcuda.so.1.1"),
            (
                "libnvidia-ptxjitcompiler.so.1",
                "libnvidia-ptxjitcompiler.so.540.3.0",
            ),
            ("libnvidia-nvvm.so.4", "libnvidia-nvvm.so.540.3.0"),
        ],
    }
}

/// The libraries the profile must find on `release`, by file name, in the profile's order.
fn want_libraries(release: Release) -> Vec<&'static str> {
    match release {
        Release::R32 => vec![
            "libcuda.so.1.1",
            "libnvidia-ptxjitcompiler.so.440.18",
            "libnvidia-fatbinaryloader.so.440.18",
            "libnvidia-rmapi-tegra.so.32.7.6",
            "libnvos.so",
            "libnvrm_gpu.so",
            "libnvrm.so",
            "libnvrm_graphics.so",
        ],
        Release::R36 => vec![
            "libcuda.so.1.1",
            "libnvidia-ptxjitcompiler.so.540.3.0",
            "libnvidia-nvvm.so.540.3.0",
            "libnvidia-rmapi-tegra.so.540.3.0",
            "libnvidia-gpucomp.so.540.3.0",
            "libnvos.so",
            "libnvrm_gpu.so",
            "libnvrm_mem.so",
            "libnvrm_host1x.so",
            "libnvrm_chip.so",
            "libnvrm_sync.so",
            "libnvrm_stream.so",
            "libnvrm_surface.so",
            "libnvsocsys.so",
            "libnvsciipc.so",
            "libnvtegrahv.so",
            "libnvidia-ml.so.1",
        ],
    }
}

/// A simulated Jetson host of `release` under a temp dir.
struct L4tHost {
    _dir: tempfile::TempDir,
    roots: HostRoots,
}

impl L4tHost {
    /// The driver files only: what resolving them needs, without root.
    fn files_only(release: Release) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Canonical, so that the real paths resolution returns compare with ours.
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let roots = HostRoots {
            dev_root: base.join("dev"),
            sys_root: base.join("sys"),
            proc_root: base.join("proc"),
            driver_root: base.join("driver"),
        };
        let root = &roots.driver_root;
        let libs = root.join(lib_dir(release));
        std::fs::create_dir_all(&libs).unwrap();
        for f in driver_files(release) {
            std::fs::write(libs.join(f), format!("{f} of the simulated L4T\n")).unwrap();
        }
        for (link, target) in driver_links(release) {
            symlink(target, libs.join(link)).unwrap();
        }
        let multiarch = root.join("usr/lib/aarch64-linux-gnu");
        if release == Release::R36 {
            // NVIDIA's link for what named the old directory, and the development link beside
            // the multiarch directory's other libraries (drivers.csv lists both).
            symlink("nvidia", multiarch.join("tegra")).unwrap();
            symlink("nvidia/libcuda.so", multiarch.join("libcuda.so")).unwrap();
            std::fs::create_dir_all(root.join("usr/sbin")).unwrap();
            std::fs::write(root.join("usr/sbin/nvidia-smi"), "#!/bin/sh\n").unwrap();
        }
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let release_line = match release {
            Release::R32 => "# R32 (release), REVISION: 7.6\n",
            Release::R36 => "# R36 (release), REVISION: 4.0\n",
        };
        std::fs::write(root.join("etc/nv_tegra_release"), release_line).unwrap();
        std::fs::create_dir_all(&roots.dev_root).unwrap();
        Self { _dir: dir, roots }
    }

    /// The driver files and the device nodes (mknod: root).
    fn with_nodes(release: Release) -> Self {
        let host = Self::files_only(release);
        for (name, major, minor) in nodes(release) {
            mknod_char(&host.roots.dev_root.join(&name), major, minor);
        }
        host
    }

    /// A path of the driver root, relative to it, as the container names it.
    fn in_root(&self, real: &Path) -> PathBuf {
        Path::new("/").join(real.strip_prefix(&self.roots.driver_root).unwrap())
    }
}

/// Whether the test can make nodes: root. Otherwise prints why it is skipped, or fails under
/// `CI=true`.
fn can_mknod() -> bool {
    devinject_testkit::require_root()
}

#[test]
fn it_is_shipped_with_its_own_resource_and_variable() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles");
    let set = profile_dir::load(&dir).unwrap();
    let jetson = set.get("nvidia-jetson").unwrap();
    assert_eq!(jetson.resource_name(), "nvidia.com/jetson-gpu");
    assert_eq!(jetson.request_env(), "NVIDIA_JETSON_VISIBLE_DEVICES");
    assert_ne!(
        jetson.resource_name(),
        set.get("nvidia").unwrap().resource_name()
    );
}

fn assert_discovers_one_gpu(release: Release) {
    let host = L4tHost::with_nodes(release);
    let inv = discover(&shipped(), &host.roots).unwrap();
    assert!(inv.withdrawn.is_empty(), "{:?}", inv.withdrawn);
    assert_eq!(inv.devices.len(), 1, "{release:?}: one GPU per board");
    let gpu = &inv.devices[0];
    assert_eq!(gpu.id.as_str(), "0", "{release:?}");
    assert_eq!(gpu.name, "nvhost-gpu");
    assert_eq!(gpu.nodes.len(), 1);
    let node = &gpu.nodes[0];
    assert_eq!(node.container_path, Path::new("/dev/nvhost-gpu"));
    assert_eq!((node.major, node.minor), (NVGPU, 0));
    let control: Vec<String> = inv
        .control_nodes
        .iter()
        .map(|n| n.container_path.display().to_string())
        .collect();
    assert_eq!(control, want_control_nodes(release), "{release:?}");
    // Each control node is the host's node of that name, numbers and all.
    for n in &inv.control_nodes {
        let rel = n.container_path.strip_prefix("/dev").unwrap();
        let (_, major, minor) = nodes(release)
            .into_iter()
            .find(|(name, _, _)| Path::new(name.as_str()) == rel)
            .unwrap();
        assert_eq!((n.major, n.minor), (major, minor), "{}", rel.display());
    }
}

#[test]
fn finds_the_one_gpu_and_its_nodes_on_l4t_r32() {
    if !can_mknod() {
        return;
    }
    assert_discovers_one_gpu(Release::R32);
}

#[test]
fn finds_the_one_gpu_and_its_nodes_on_l4t_r36() {
    if !can_mknod() {
        return;
    }
    assert_discovers_one_gpu(Release::R36);
}

fn assert_resolves_the_driver(release: Release) -> (L4tHost, DriverFiles) {
    let host = L4tHost::files_only(release);
    let files = resolve_driver_files(&shipped(), &host.roots).unwrap();
    let names: Vec<&str> = files
        .libraries
        .iter()
        .map(|l| l.file_name.as_str())
        .collect();
    assert_eq!(names, want_libraries(release), "{release:?}");
    // Each is the real file in the release's own directory, whichever name found it.
    let dir = Path::new("/").join(lib_dir(release));
    for lib in &files.libraries {
        assert_eq!(
            host.in_root(&lib.path),
            dir.join(&lib.file_name),
            "{release:?}"
        );
    }
    let cuda = &files.libraries[0];
    assert_eq!(cuda.links, ["libcuda.so"]);
    let release_file: Vec<_> = files.files.iter().map(|f| &f.container_path).collect();
    assert_eq!(release_file, [Path::new("/etc/nv_tegra_release")]);
    (host, files)
}

#[test]
fn resolves_the_cuda_driver_in_the_tegra_directory_on_l4t_r32() {
    let (_host, files) = assert_resolves_the_driver(Release::R32);
    assert!(files.binaries.is_empty(), "{:?}", files.binaries);
}

#[test]
fn resolves_the_cuda_driver_in_the_nvidia_directory_on_l4t_r36() {
    let (host, files) = assert_resolves_the_driver(Release::R36);
    let smi: Vec<_> = files
        .binaries
        .iter()
        .map(|b| (host.in_root(&b.path), b.container_path.clone()))
        .collect();
    assert_eq!(
        smi,
        [(
            PathBuf::from("/usr/sbin/nvidia-smi"),
            PathBuf::from("/usr/sbin/nvidia-smi")
        )]
    );
}

/// What a container asking for GPU 0 on an r36 Orin gets: the GPU's node and every control
/// node, a device rule for each, and the driver in the image's library directory.
#[test]
fn a_container_asking_for_gpu_0_gets_the_nodes_and_the_driver() {
    if !can_mknod() {
        return;
    }
    let host = L4tHost::with_nodes(Release::R36);
    let profile = shipped();
    let inventory = discover(&profile, &host.roots).unwrap();
    let driver_files = resolve_driver_files(&profile, &host.roots).unwrap();
    let layout = ContainerLayout {
        lib_dir: "/usr/lib/aarch64-linux-gnu".into(),
    };
    let plan_for = |value: &str| {
        plan(PlanInput {
            profile: &profile,
            inventory: &inventory,
            request: &Request::parse(Some(value)).unwrap(),
            resolve: Resolve::Ids,
            driver_files: &driver_files,
            capabilities: &Capabilities::All,
            layout: &layout,
        })
    };
    for value in ["0", "all"] {
        let plan = plan_for(value).unwrap().unwrap();
        assert_eq!(plan.devices.len(), 1, "{value}");
        let edits = &plan.edits;
        let paths: Vec<String> = edits
            .device_nodes
            .iter()
            .map(|n| n.container_path.display().to_string())
            .collect();
        let mut want = vec!["/dev/nvhost-gpu".to_owned()];
        want.extend(want_control_nodes(Release::R36));
        assert_eq!(paths, want, "{value}");
        assert_eq!(edits.cgroup_rules.len(), want.len(), "{value}");
        let libs: Vec<PathBuf> = edits
            .mounts
            .iter()
            .filter(|m| m.kind == MountKind::Library)
            .map(|m| m.container_path.clone())
            .collect();
        let want_libs: Vec<PathBuf> = want_libraries(Release::R36)
            .iter()
            .map(|l| layout.lib_dir.join(l))
            .collect();
        assert_eq!(libs, want_libs, "{value}");
        assert!(
            edits
                .symlinks
                .iter()
                .any(|s| s.link == layout.lib_dir.join("libcuda.so")),
            "{:?}",
            edits.symlinks
        );
        assert_eq!(edits.ldcache_dirs, std::slice::from_ref(&layout.lib_dir));
    }
    // There is no second GPU to ask for.
    assert!(plan_for("1").is_err());
}

/// A host with a discrete NVIDIA GPU and no Tegra: the profile finds no GPU (the nvidia
/// profile's); its missing required nodes read as no devices, as the device plugin takes them.
#[test]
fn a_discrete_gpu_is_not_a_jetson_gpu() {
    if !can_mknod() {
        return;
    }
    let host = L4tHost::files_only(Release::R36);
    for (name, major, minor) in [
        ("nvidia0", NVIDIA, 0),
        ("nvidiactl", NVIDIA, 255),
        ("nvidia-uvm", 509, 0),
    ] {
        mknod_char(&host.roots.dev_root.join(name), major, minor);
    }
    match discover(&shipped(), &host.roots) {
        Ok(inv) => assert!(inv.devices.is_empty(), "{:?}", inv.devices),
        Err(DiscoveryError::Missing { path, .. }) => {
            assert_eq!(path, host.roots.dev_root.join("nvhost-ctrl-gpu"))
        }
        Err(e) => panic!("{e}"),
    }
    let mut without_control = shipped();
    without_control.control_nodes.clear();
    let inv = discover(&without_control, &host.roots).unwrap();
    assert!(inv.devices.is_empty(), "{:?}", inv.devices);
}
