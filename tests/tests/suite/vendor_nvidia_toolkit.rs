//! devinject against NVIDIA's own Container Toolkit (1.20.2, built by
//! `scripts/nvidia-toolkit-build.sh`) on the same simulated node and the same real 535 driver
//! root (Debian 12's packages as installed, [`InstalledStacks`]): one container through
//! `nvidia-container-runtime` in `cdi` mode with the spec `nvidia-ctk cdi generate
//! --mode=management` writes (`nvidia.com/gpu=all`, every file of the driver), one through the
//! hook and one through the shim asking for GPU 0 with `NVIDIA_DRIVER_CAPABILITIES=all`. Each
//! gets its own rootfs (NVIDIA's hooks write into it). What each container sees is compared:
//! the device nodes in `/dev`, the NVIDIA libraries its dynamic loader resolves by soname (the
//! linker cache, `ldconfig -p`, and `dlopen` of the main ones), the NVIDIA binaries on `PATH`,
//! and how `nvidia-smi` and `cuInit` end.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use devinject_tests::bins::bin;
use devinject_tests::nvidia_toolkit::{cycle, toolkit, InstalledStacks, Toolkit};
use devinject_tests::runc::{container_id, runc_path, shim_command, Bundle};
use devinject_tests::skip::require_runc_demo;
use devinject_tests::vendor::{nvidia_host, nvidia_image, stacks, VendorHost};

/// How the container gets the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `nvidia-container-runtime` (cdi mode), `NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all`.
    Nvidia,
    /// runc with `devinject-hook` as a createRuntime hook.
    Hook,
    /// `devinject-runtime` in front of runc.
    Shim,
}

/// Libraries `dlopen`ed by soname in every container: one or more per part.
const DLOPEN: &[&str] = &[
    "libcuda.so.1",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",
    "libnvidia-ml.so.1",
    "libnvidia-encode.so.1",
    "libnvcuvid.so.1",
    "libEGL_nvidia.so.0",
    "libGLX_nvidia.so.0",
    "libnvidia-ngx.so.1",
];

/// What one container saw.
#[derive(Debug)]
struct Seen {
    path: Route,
    text: String,
    nodes: BTreeSet<String>,
    libraries: BTreeSet<String>,
    binaries: BTreeSet<String>,
}

const SCRIPT: &str = "nvidia-smi -L; echo \"smi exit $?\"; cuda-smoke; \
    echo '== dlopen'; dlopen-check $DLOPEN; \
    echo '== dev'; ls /dev; \
    echo '== ldcache'; ldconfig -p | awk 'NR > 1 { print $1 }'; \
    echo '== path'; for d in $(echo \"$PATH\" | tr : ' '); do ls \"$d\" 2>/dev/null; done; \
    echo '== end'";

/// An NVIDIA library by its name (the driver's, not glibc's or the image's).
fn nvidia_library(name: &str) -> bool {
    name.contains("nvidia")
        || ["libcuda", "libnvcuvid", "libnvoptix", "libcudadebugger"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The lines between `== <name>` and the next `== ` line.
fn section(text: &str, name: &str) -> BTreeSet<String> {
    text.lines()
        .skip_while(|l| *l != format!("== {name}"))
        .skip(1)
        .take_while(|l| !l.starts_with("== "))
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn run(dir: &Path, host: &VendorHost, path: Route, nvidia: &(Toolkit, std::path::PathBuf)) -> Seen {
    let mut b = Bundle::new(&dir.join(format!("{path:?}")), &["/bin/true"]).unwrap();
    let rootfs = b.rootfs();
    nvidia_image(&rootfs, &host.driver_root).unwrap();
    // update-ldcache of NVIDIA's spec writes /etc/ld.so.conf.d into the image's /etc.
    b.args(&["/bin/sh", "-c", SCRIPT]);
    b.env(&format!("DLOPEN={}", DLOPEN.join(" ")));
    let runtime = match path {
        Route::Nvidia => {
            b.env("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all");
            nvidia.0.runtime_command(&nvidia.1)
        }
        Route::Hook => {
            b.env("NVIDIA_VISIBLE_DEVICES=0")
                .env("NVIDIA_DRIVER_CAPABILITIES=all")
                .hook("createRuntime", &bin("devinject-hook"), &host.config);
            vec![runc_path()]
        }
        Route::Shim => {
            b.env("NVIDIA_VISIBLE_DEVICES=0")
                .env("NVIDIA_DRIVER_CAPABILITIES=all");
            shim_command(&host.config, &runc_path())
        }
    };
    b.write().unwrap();
    let c = cycle(
        &runtime,
        &b.state_root(),
        &b.dir,
        &container_id("nvtk"),
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(c.failed.is_none(), "{path:?} create failed: {}", c.text);
    let text = c.text;
    let libraries = section(&text, "ldcache")
        .into_iter()
        .filter(|l| nvidia_library(l))
        .collect();
    let nodes = section(&text, "dev")
        .into_iter()
        .filter(|n| n.starts_with("nvidia"))
        .collect();
    let binaries = section(&text, "path")
        .into_iter()
        .filter(|n| n.starts_with("nvidia"))
        .collect();
    Seen {
        path,
        text,
        nodes,
        libraries,
        binaries,
    }
}

impl Seen {
    fn has(&self, line: &str) -> bool {
        self.text.lines().any(|l| l.trim() == line)
    }

    fn line_starting(&self, prefix: &str) -> Option<&str> {
        self.text.lines().find(|l| l.starts_with(prefix))
    }

    fn ctx(&self) -> String {
        format!("{:?} saw:\n{}", self.path, self.text)
    }
}

#[test]
fn the_hook_and_the_shim_inject_what_nvidias_runtime_injects_from_its_cdi_spec() {
    let Some(stacks) = stacks() else { return };
    let Some(tk) = toolkit() else { return };
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let installed = InstalledStacks::mount(&t.path().join("stacks"), &stacks).unwrap();
    let host = nvidia_host(&t.path().join("host"), &installed.dir, &["nvidia"]).unwrap();
    let spec_dir = t.path().join("cdi");
    tk.generate_spec(&host, &spec_dir).unwrap();
    let config = tk
        .write_config(&t.path().join("nvidia"), &spec_dir, Path::new(&runc_path()))
        .unwrap();
    let nvidia = (tk, config);

    let theirs = run(t.path(), &host, Route::Nvidia, &nvidia);
    // The reference saw what it should, or the comparison proves nothing.
    for node in [
        "nvidia0",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        assert!(theirs.nodes.contains(node), "{node}: {}", theirs.ctx());
    }
    assert!(
        theirs.libraries.contains("libcuda.so.1") && theirs.libraries.len() > 20,
        "{}",
        theirs.ctx()
    );
    assert!(theirs.binaries.contains("nvidia-smi"), "{}", theirs.ctx());

    for path in [Route::Hook, Route::Shim] {
        let ours = run(t.path(), &host, path, &nvidia);
        let ctx = format!("{}\n\n{}", ours.ctx(), theirs.ctx());
        assert_eq!(ours.nodes, theirs.nodes, "device nodes: {ctx}");
        let missing: BTreeSet<&str> = theirs
            .libraries
            .difference(&ours.libraries)
            .map(String::as_str)
            .collect();
        // NVIDIA's generator mirrors every link beside a driver library (`create-symlinks`),
        // the development names `libcuda.so` and others among them, and ldconfig lists them:
        // the nvidia profile's `links` give the same names.
        assert!(
            missing.is_empty(),
            "{path:?} lacks libraries NVIDIA's runtime injects: {missing:?}\n{ctx}"
        );
        let missing: Vec<&String> = theirs.binaries.difference(&ours.binaries).collect();
        assert!(
            missing.is_empty(),
            "{path:?} lacks binaries NVIDIA's runtime injects: {missing:?}\n{ctx}"
        );
        let extra: Vec<&String> = ours.libraries.difference(&theirs.libraries).collect();
        eprintln!("{path:?} also resolves, beyond NVIDIA's runtime: {extra:?}");
        // The libraries load (or fail to) alike.
        for lib in DLOPEN {
            let loaded = format!("loaded {lib}");
            assert_eq!(
                ours.has(&loaded),
                theirs.has(&loaded),
                "dlopen {lib}: {ctx}"
            );
        }
        // nvidia-smi and cuInit stop at the kernel, the same way in both.
        for seen in [&ours, &theirs] {
            assert!(
                seen.text
                    .contains("couldn't communicate with the NVIDIA driver"),
                "{ctx}"
            );
        }
        assert_eq!(
            ours.line_starting("smi exit "),
            theirs.line_starting("smi exit "),
            "{ctx}"
        );
        let cu = theirs
            .line_starting("cuda-smoke: cuInit")
            .expect("cuInit ran");
        assert!(cu.contains("CUDA_ERROR_NO_DEVICE"), "{ctx}");
        assert_eq!(ours.line_starting("cuda-smoke: cuInit"), Some(cu), "{ctx}");
    }
}
