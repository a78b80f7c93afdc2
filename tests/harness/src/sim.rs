//! A simulated accelerator host for the `demo` profile.
//!
//! Nodes are made with mknod under a private dev root, each with the numbers of a harmless real
//! kernel device that runc does not allow by default, so that "granted opens, un-granted is
//! denied" is a real cgroup decision. The driver root holds a real shared library built with gcc
//! (`libdemo.so.1.0.0`, soname `libdemo.so.1`) and a `demo-smi` tool.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The demo accelerators: name, major, minor. loop-control, btrfs-control, autofs and fuse: they open
/// without side effects and none is in runc's default device allow list.
pub const ACCELS: [(&str, u32, u32); 4] = [
    ("accel0", 10, 237),
    ("accel1", 10, 234),
    ("accel2", 10, 235),
    ("accel3", 10, 229),
];
/// The demo control node (the numbers of /dev/net/tun).
pub const CTL: (&str, u32, u32) = ("ctl", 10, 200);

/// A prepared simulated host.
#[derive(Debug, Clone)]
pub struct SimHost {
    /// Root of everything below.
    pub dir: PathBuf,
    /// The dev root holding `demo/accelN` and `demo/ctl`.
    pub dev_root: PathBuf,
    /// The driver root holding `/opt/devinject-demo/...`.
    pub driver_root: PathBuf,
    /// A profiles dir holding the shipped `demo.toml`.
    pub profiles_dir: PathBuf,
    /// The host config file pointing at all of the above.
    pub config: PathBuf,
}

/// The environment variable naming a copy of the repository's `profiles/` directory, for a
/// harness binary run where the source tree is not (the arm64 guest of `scripts/arm64-guest.sh`).
pub const SHIPPED_PROFILES_ENV: &str = "DEVINJECT_SHIPPED_PROFILES";

/// The repository's `profiles/` directory (or the copy [`SHIPPED_PROFILES_ENV`] names).
pub fn shipped_profiles() -> PathBuf {
    match std::env::var_os(SHIPPED_PROFILES_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles"),
    }
}

/// Makes a char device node.
pub fn mknod(path: &Path, major: u32, minor: u32, mode: &str) -> Result<()> {
    mknod_kind(path, 'c', major, minor, mode)
}

/// Makes a device node of `kind` (`c` or `b`).
pub fn mknod_kind(path: &Path, kind: char, major: u32, minor: u32, mode: &str) -> Result<()> {
    let st = Command::new("mknod")
        .args(["-m", mode])
        .arg(path)
        .arg(kind.to_string())
        .arg(major.to_string())
        .arg(minor.to_string())
        .status()
        .context("run mknod")?;
    if !st.success() {
        bail!("mknod {} failed", path.display());
    }
    Ok(())
}

/// Builds the simulated host under `dir` with the given profiles copied in (from `profiles/`).
pub fn demo_host(dir: &Path, profiles: &[&str]) -> Result<SimHost> {
    let dev_root = dir.join("dev");
    let driver_root = dir.join("driver");
    let profiles_dir = dir.join("profiles");
    std::fs::create_dir_all(dev_root.join("demo"))?;
    std::fs::create_dir_all(dir.join("sys"))?;
    std::fs::create_dir_all(&profiles_dir)?;
    for (name, ma, mi) in ACCELS.iter().chain(std::iter::once(&CTL)) {
        mknod(&dev_root.join("demo").join(name), *ma, *mi, "0666")?;
    }
    let lib = driver_root.join(DEMO_LIB_DIR);
    let bin = driver_root.join("opt/devinject-demo/bin");
    std::fs::create_dir_all(&lib)?;
    std::fs::create_dir_all(&bin)?;
    build_demo_library(dir, &lib.join(DEMO_LIB_FILE))?;
    std::os::unix::fs::symlink(DEMO_LIB_FILE, lib.join(DEMO_SONAME))?;
    let smi = bin.join("demo-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho \"demo-smi: devices: $(ls /dev/demo | tr '\\n' ' ')\"\n",
    )?;
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    copy_profiles(&profiles_dir, profiles)?;
    let host = SimHost {
        dir: dir.to_owned(),
        dev_root,
        driver_root,
        profiles_dir,
        config: dir.join("config.toml"),
    };
    host.write_config("")?;
    Ok(host)
}

/// [`demo_host`] with the demo profile and `accels` accelerators (at least [`ACCELS`]'s): the
/// ones past those are `demo/accel<n>` nodes with the numbers of `ACCELS[n % ACCELS.len()]`.
pub fn demo_host_with_accels(dir: &Path, accels: usize) -> Result<SimHost> {
    let host = demo_host(dir, &["demo"])?;
    for i in ACCELS.len()..accels {
        let (_, major, minor) = ACCELS[i % ACCELS.len()];
        mknod(
            &host.dev_root.join(format!("demo/accel{i}")),
            major,
            minor,
            "0666",
        )?;
    }
    Ok(host)
}

/// The environment variable naming a `libdemo.so.1.0.0` built beforehand, which [`demo_host`]
/// copies instead of running gcc: a machine without a compiler (the arm64 guest of
/// `scripts/arm64-guest.sh`) gets one cross-built by the same source and flags.
pub const DEMO_LIBRARY_ENV: &str = "DEVINJECT_DEMO_LIBRARY";

/// The demo library's source: one function, for programs linked against it.
pub const DEMO_LIBRARY_SOURCE: &str = "int demo_version(void) { return 1; }\n";

/// Puts the demo library at `to`: built by gcc from [`DEMO_LIBRARY_SOURCE`] in `dir`, or copied
/// from [`DEMO_LIBRARY_ENV`] where that is set.
fn build_demo_library(dir: &Path, to: &Path) -> Result<()> {
    if let Some(built) = std::env::var_os(DEMO_LIBRARY_ENV).filter(|v| !v.is_empty()) {
        std::fs::copy(&built, to).with_context(|| {
            format!(
                "copy the demo library {} ({DEMO_LIBRARY_ENV})",
                Path::new(&built).display()
            )
        })?;
        return Ok(());
    }
    let src = dir.join("libdemo.c");
    std::fs::write(&src, DEMO_LIBRARY_SOURCE)?;
    let out = Command::new("gcc")
        .args([
            "-shared",
            "-fPIC",
            &format!("-Wl,-soname,{DEMO_SONAME}"),
            "-o",
        ])
        .arg(to)
        .arg(&src)
        .output()
        .context("run gcc to build libdemo.so")?;
    if !out.status.success() {
        bail!("gcc failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The demo library's directory under the driver root.
const DEMO_LIB_DIR: &str = "opt/devinject-demo/lib";
/// The demo library's file name.
pub const DEMO_LIB_FILE: &str = "libdemo.so.1.0.0";
/// Its soname.
pub const DEMO_SONAME: &str = "libdemo.so.1";

impl SimHost {
    /// The demo library's host file.
    pub fn demo_library(&self) -> PathBuf {
        self.driver_root.join(DEMO_LIB_DIR).join(DEMO_LIB_FILE)
    }

    /// Sets the top-level key `key = value` (TOML) in the installed profile `profile`.
    pub fn set_profile_key(&self, profile: &str, key: &str, value: &str) -> Result<()> {
        let path = self.profiles_dir.join(format!("{profile}.toml"));
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        std::fs::write(&path, format!("{key} = {value}\n{text}"))
            .with_context(|| format!("write {}", path.display()))
    }

    /// Writes the host config for this host (its roots, `sys` below its dir) with `extra`
    /// appended.
    pub fn write_config(&self, extra: &str) -> Result<()> {
        write_config(
            &self.config,
            &self.profiles_dir,
            &self.dev_root,
            &self.driver_root,
            &self.dir.join("sys"),
            extra,
        )
    }
}

/// Copies the shipped `profiles` into `dir`.
pub fn copy_profiles(dir: &Path, profiles: &[&str]) -> Result<()> {
    for p in profiles {
        std::fs::copy(
            shipped_profiles().join(format!("{p}.toml")),
            dir.join(format!("{p}.toml")),
        )
        .with_context(|| format!("copy profile {p}"))?;
    }
    Ok(())
}

/// Writes a host config for the real host's devices (dev root `/dev`, driver root `/`, sys root
/// `/sys`) into `dir`, with only the shipped `profiles` copied into `dir/profiles`; returns its
/// path.
pub fn real_host_config(dir: &Path, profiles: &[&str]) -> Result<PathBuf> {
    let profiles_dir = dir.join("profiles");
    std::fs::create_dir_all(&profiles_dir)?;
    copy_profiles(&profiles_dir, profiles)?;
    let config = dir.join("config.toml");
    let (dev, driver, sys) = (Path::new("/dev"), Path::new("/"), Path::new("/sys"));
    write_config(&config, &profiles_dir, dev, driver, sys, "")?;
    Ok(config)
}

/// Writes a host config file; `extra` is appended verbatim (e.g. `mount_api = "classic"`).
pub fn write_config(
    path: &Path,
    profiles_dir: &Path,
    dev_root: &Path,
    driver_root: &Path,
    sys_root: &Path,
    extra: &str,
) -> Result<()> {
    // Refusals go to the test's own decision log, not the machine's `/run/devinject`, unless
    // the test names one.
    let decisions = if extra.contains("decision_log_dir") {
        String::new()
    } else {
        let dir = path.parent().unwrap_or(Path::new(".")).join("decisions");
        format!("decision_log_dir = {dir:?}\n")
    };
    let text = format!(
        "profiles_dir = {:?}\ndev_root = {:?}\ndriver_root = {:?}\nsys_root = {:?}\nlog_level = \"info\"\n{decisions}{extra}\n",
        profiles_dir, dev_root, driver_root, sys_root
    );
    std::fs::write(path, text)?;
    Ok(())
}

/// A host configuration line naming an ldconfig that does not exist: where the hook must write
/// the linker cache itself, a fall back to ldconfig fails the container.
pub const NO_LDCONFIG: &str = "ldconfig = \"/nonexistent/devinject-test/ldconfig\"";

/// Where the demo library lands in a busybox rootfs.
pub const LIB: &str = "/usr/lib/libdemo.so.1.0.0";
/// Its soname link.
pub const SONAME: &str = "/usr/lib/libdemo.so.1";

/// The probe command for every demo node and the demo library.
pub fn demo_probe_args() -> Vec<String> {
    let nodes: Vec<String> = ACCELS
        .iter()
        .chain(std::iter::once(&CTL))
        .map(|(n, _, _)| format!("/dev/demo/{n}"))
        .collect();
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    crate::probe::probe_args(&node_refs, &[LIB, SONAME])
}

/// Asserts what a container granted demo devices 0 and 1 must see, with `accel2` bind-mounted
/// but not granted: the granted nodes and the control node with the host's numbers and mode,
/// opening; accel2 denied by the cgroup; accel3 absent; the library read-only and cached.
pub fn assert_demo_granted_0_1(report: &crate::probe::Report, out: &std::process::Output) {
    assert_demo_granted_0_1_in(report, &crate::runc::describe(out));
}

/// [`assert_demo_granted_0_1`] with `ctx` (the container's output, logs) shown on failure.
pub fn assert_demo_granted_0_1_in(report: &crate::probe::Report, ctx: &str) {
    for (name, ma, mi) in [ACCELS[0], ACCELS[1], CTL] {
        let n = report.node(&format!("/dev/demo/{name}"));
        assert_eq!(
            (n.kind.as_str(), n.major, n.minor),
            ("c", ma, mi),
            "{name}: {ctx}"
        );
        assert_eq!(n.mode, "666", "{name}: {ctx}");
        assert_eq!(n.open, "ok", "{name} must open: {ctx}");
    }
    let denied = report.node("/dev/demo/accel2");
    assert_eq!(denied.kind, "c", "{ctx}");
    assert_eq!(
        denied.open, "EPERM",
        "un-granted accel2 must be denied: {ctx}"
    );
    assert_eq!(report.node("/dev/demo/accel3").kind, "missing", "{ctx}");
    let lib = report.lib(LIB);
    assert!(
        lib.present && lib.read_only,
        "library must be there read-only: {ctx}"
    );
    assert!(
        report.lib(SONAME).in_ldcache,
        "soname must be in ld.so.cache: {ctx}"
    );
}

/// Asserts what a uid-1000 container granted demo devices 0 and 1, whose host nodes are
/// `0660 root:<group>`, must see: both with their numbers and that mode, opening; accel3 absent.
/// (How the un-granted accel2 is refused depends on the path: by the cgroup when the process
/// was given the group, by the file mode when the node was.) `ctx` is shown on failure.
pub fn assert_group_only_granted_0_1(report: &crate::probe::Report, ctx: &str) {
    for (name, major, minor) in [ACCELS[0], ACCELS[1]] {
        let n = report.node(&format!("/dev/demo/{name}"));
        assert_eq!(
            (
                n.kind.as_str(),
                n.major,
                n.minor,
                n.mode.as_str(),
                n.open.as_str()
            ),
            ("c", major, minor, "660", "ok"),
            "{name}, granted, opens as uid 1000:\n{ctx}"
        );
    }
    assert_eq!(report.node("/dev/demo/accel3").kind, "missing", "{ctx}");
}

/// Asserts what a container granted exactly the demo devices `ids` (by index) must see: each
/// granted accelerator with its numbers, opening; the others absent; the control node opening;
/// the library read-only and its soname in the linker cache. `ctx` is shown on failure.
pub fn assert_demo_granted_exactly(report: &crate::probe::Report, ids: &[String], ctx: &str) {
    for (i, (name, major, minor)) in ACCELS.iter().enumerate() {
        let node = report.node(&format!("/dev/demo/{name}"));
        if ids.contains(&i.to_string()) {
            assert_eq!(
                (
                    node.kind.as_str(),
                    node.major,
                    node.minor,
                    node.open.as_str()
                ),
                ("c", *major, *minor, "ok"),
                "{name} was granted ({ids:?}):\n{ctx}"
            );
        } else {
            assert_eq!(
                node.kind, "missing",
                "{name} was not granted ({ids:?}):\n{ctx}"
            );
        }
    }
    assert_eq!(
        report.node(&format!("/dev/demo/{}", CTL.0)).open,
        "ok",
        "the control node:\n{ctx}"
    );
    let lib = report.lib(LIB);
    assert!(
        lib.present && lib.read_only,
        "the library, read-only:\n{ctx}"
    );
    assert!(
        report.lib(SONAME).in_ldcache,
        "the soname in the linker cache:\n{ctx}"
    );
}

/// Sets `key = value` (`value` in TOML syntax, e.g. `"\"warn\""` or `"2"`) in the host config at
/// `config`, replacing the key's line or appending one.
pub fn set_config(config: &Path, key: &str, value: &str) -> Result<()> {
    let text = std::fs::read_to_string(config)?;
    let line = format!("{key} = {value}");
    let mut found = false;
    let mut out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.split('=').next().map(str::trim) == Some(key) {
                found = true;
                line.clone()
            } else {
                l.to_owned()
            }
        })
        .collect();
    if !found {
        out.push(line);
    }
    std::fs::write(config, out.join("\n") + "\n")?;
    Ok(())
}

/// A node's kind (`c` or `b`), major and minor.
pub type DeviceNumbers = (char, u32, u32);

/// Real device numbers a simulated accelerator can borrow: static kernel minors that open
/// without capabilities and with no side effect, none in runc's default allow list
/// (loop-control, btrfs-control, autofs, fuse, hw_random, kvm; vcs/vcsu/vcsa 0 and 1; unbound
/// loop block devices). Which of them work on a host is checked at run time by
/// [`opens_without_capabilities`]: a kernel may lack a driver (`ENODEV`) or a console (`ENXIO`).
pub const BORROWED_DEVICES: [DeviceNumbers; 20] = [
    ('c', 10, 237),
    ('b', 7, 0),
    ('c', 10, 234),
    ('b', 7, 1),
    ('c', 10, 235),
    ('c', 10, 229),
    ('c', 10, 183),
    ('c', 7, 0),
    ('c', 7, 1),
    ('c', 7, 64),
    ('c', 7, 65),
    ('c', 7, 128),
    ('c', 7, 129),
    ('c', 10, 232),
    ('b', 7, 2),
    ('b', 7, 3),
    ('b', 7, 4),
    ('b', 7, 5),
    ('b', 7, 6),
    ('b', 7, 7),
];

/// True when a node `kind major:minor` made at `scratch` can be opened for reading by a process
/// without any capability (`setpriv` drops them all), as a container process would open it.
pub fn opens_without_capabilities(
    scratch: &Path,
    kind: char,
    major: u32,
    minor: u32,
) -> Result<bool> {
    let _ = std::fs::remove_file(scratch);
    mknod_kind(scratch, kind, major, minor, "0666")?;
    let out = Command::new("setpriv")
        .args([
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            crate::rootfs::BUSYBOX,
            "sh",
            "-c",
            "exec 3< \"$0\"",
        ])
        .arg(scratch)
        .output()
        .context("run setpriv (util-linux)")?;
    std::fs::remove_file(scratch)?;
    Ok(out.status.success())
}

/// Like [`demo_host`], but with `count` accelerators `demo/accel0..` borrowing the numbers of
/// the first `count` usable [`BORROWED_DEVICES`] (char and block); returns the host and the
/// `(kind, major, minor)` of each accelerator in index order.
pub fn big_demo_host(dir: &Path, count: usize) -> Result<(SimHost, Vec<DeviceNumbers>)> {
    let host = demo_host(dir, &["demo"])?;
    for (name, _, _) in ACCELS {
        std::fs::remove_file(host.dev_root.join("demo").join(name))?;
    }
    let scratch = dir.join("probe-node");
    let mut chosen = Vec::new();
    for &(kind, major, minor) in &BORROWED_DEVICES {
        if chosen.len() == count {
            break;
        }
        if opens_without_capabilities(&scratch, kind, major, minor)? {
            chosen.push((kind, major, minor));
        }
    }
    if chosen.len() < count {
        bail!(
            "only {} of the borrowed device numbers open here, {count} needed: {chosen:?}",
            chosen.len()
        );
    }
    for (i, &(kind, major, minor)) in chosen.iter().enumerate() {
        let node = host.dev_root.join(format!("demo/accel{i}"));
        mknod_kind(&node, kind, major, minor, "0666")?;
    }
    Ok((host, chosen))
}

/// Profile text `text` without its `[partitions]` tables: for a test that gives the demo
/// profile `replicas`, `[capacity]` or `[prepare]`, which a partitioned device cannot have.
pub fn without_partitions(text: &str) -> String {
    let mut skipping = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let header = line.trim_start();
        if header.starts_with('[') {
            skipping = header.starts_with("[partitions]") || header.starts_with("[partitions.");
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The function [`add_demo_prepare_step`] loads, and its friendly resource name.
pub const DEMO_FUNCTION: (&str, &str) = ("nlb3", "devinject.io/demo-nlb3");

/// The function whose prepare run fails, with this message on stderr.
pub const DEMO_BROKEN_FUNCTION: (&str, &str) = ("broken", "bitstream broken does not fit");

/// The function whose prepare run takes this many seconds (within the profile's deadline,
/// beyond containerd's NRI request timeout).
pub const DEMO_SLOW_FUNCTION: (&str, u32) = ("slow", 3);

/// Gives `host`'s demo profile a prepare step (docs/prepare.md) that "programs" a device the
/// way an FPGA's would: its program writes the function into `<dir>/accelN/function` of a
/// sysfs-like directory, which it returns. Functions: [`DEMO_FUNCTION`] (with its friendly
/// name), [`DEMO_BROKEN_FUNCTION`], whose run fails, and [`DEMO_SLOW_FUNCTION`]; the profile's
/// partitions go, as a device with a prepare step has none. Profiles are read per container,
/// so a running hook, shim or NRI plugin uses it from the next container on.
pub fn add_demo_prepare_step(host: &SimHost) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let sys = host.dir.join("sys/class/demo-fpga");
    std::fs::create_dir_all(&sys)?;
    let program = host.dir.join("demo-program");
    let (broken, message) = DEMO_BROKEN_FUNCTION;
    let (slow, seconds) = DEMO_SLOW_FUNCTION;
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\nset -e\n\
             [ \"$DEVINJECT_FUNCTION\" != {broken} ] || {{ echo '{message}' >&2; exit 3; }}\n\
             [ \"$DEVINJECT_FUNCTION\" != {slow} ] || exec sleep {seconds}\n\
             out=\"$1/accel$DEVINJECT_DEVICE\"\nmkdir -p \"$out\"\n\
             printf '%s' \"$DEVINJECT_FUNCTION\" > \"$out/function\"\n"
        ),
    )?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
    let profile = host.profiles_dir.join("demo.toml");
    let mut text = without_partitions(&std::fs::read_to_string(&profile)?);
    let (function, friendly) = DEMO_FUNCTION;
    text.push_str(&format!(
        "\n[prepare]\ncommand = [\"{}\", \"{}\"]\ntimeout_ms = 5000\n\
         [[prepare.functions]]\nid = \"{function}\"\nresource = \"{friendly}\"\n\
         [[prepare.functions]]\nid = \"{broken}\"\n[[prepare.functions]]\nid = \"{slow}\"\n",
        program.display(),
        sys.display()
    ));
    std::fs::write(&profile, text)?;
    Ok(sys)
}
