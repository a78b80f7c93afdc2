//! Simulated hosts for the benchmark: N device nodes and L driver libraries per host.
//!
//! Nodes are mknod'ed char devices with major 240 (reserved for local, experimental use: no
//! driver claims it, so nothing is ever opened), one minor per device. Libraries are real ELF
//! shared objects linked by gcc from one object file, each with its own soname
//! (`libbenchK.so.1.0.0`, soname `libbenchK.so.1`, plus the soname link a driver install has).
//! Every host's profiles dir holds the `bench` profile and all shipped profiles, as an installed
//! node would: the hook and the shim read the whole directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use devinject_devices::LibraryNames;
use devinject_tests::sim::{mknod, shipped_profiles, write_config};

/// The char major of the simulated devices.
pub const MAJOR: u32 = 240;
/// The profile name, also its request variable's stem (`BENCH_VISIBLE_DEVICES`).
pub const PROFILE: &str = "bench";
/// The request variable.
pub const REQUEST_ENV: &str = "BENCH_VISIBLE_DEVICES";
/// Where the libraries live under the driver root (and the profile's glob).
pub const LIB_DIR: &str = "/opt/bench/lib";

/// One simulated device node.
#[derive(Debug, Clone)]
pub struct BenchNode {
    /// Host path under the dev root.
    pub host_path: PathBuf,
    /// Path in the container.
    pub container_path: String,
    /// Minor number (major is [`MAJOR`]).
    pub minor: u32,
}

/// One simulated driver library.
#[derive(Debug, Clone)]
pub struct BenchLib {
    /// Host path of the real file.
    pub host_path: PathBuf,
    /// Its file name (`libbenchK.so.1.0.0`).
    pub file_name: String,
    /// Its soname (`libbenchK.so.1`).
    pub soname: String,
}

/// A host with `nodes.len()` devices and `libs.len()` libraries, and the config file for it.
#[derive(Debug, Clone)]
pub struct BenchHost {
    /// The device nodes.
    pub nodes: Vec<BenchNode>,
    /// The libraries.
    pub libs: Vec<BenchLib>,
    /// The host config file (`--config`) for the hook and the shim.
    pub config: PathBuf,
    /// The same host with the bench profile's `library_names = "soname"`.
    pub soname_config: PathBuf,
    pub dev_root: PathBuf,
    pub driver_root: PathBuf,
    /// The sys root (empty: the bench profile reads no sysfs attribute).
    pub sys_root: PathBuf,
    pub profiles_dir: PathBuf,
}

/// Builds hosts under one work directory, sharing dev roots, driver roots and profile dirs
/// between hosts with the same N or L.
#[derive(Debug)]
pub struct HostFactory {
    dir: PathBuf,
    object: PathBuf,
}

impl HostFactory {
    /// Compiles the library object once under `dir`.
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let src = dir.join("libbench.c");
        std::fs::write(&src, "int bench_version(void) { return 1; }\n")?;
        let object = dir.join("libbench.o");
        run_gcc(
            Command::new("gcc")
                .args(["-c", "-fPIC", "-O2", "-o"])
                .arg(&object)
                .arg(&src),
        )?;
        Ok(Self {
            dir: dir.to_owned(),
            object,
        })
    }

    /// The host with `devices` nodes and `libraries` libraries (built on first use).
    pub fn host(&self, devices: usize, libraries: usize) -> Result<BenchHost> {
        let dev_root = self.dir.join(format!("dev-{devices}"));
        let nodes = self.dev_root(&dev_root, devices)?;
        let driver_root = self.dir.join(format!("driver-{libraries}"));
        let libs = self.driver_root(&driver_root, libraries)?;
        let sys_root = self.dir.join("sys");
        std::fs::create_dir_all(&sys_root)?;
        let roots = [&dev_root, &driver_root, &sys_root];
        let (config, profiles_dir) = self.config(devices, libraries, LibraryNames::File, roots)?;
        let (soname_config, _) = self.config(devices, libraries, LibraryNames::Soname, roots)?;
        Ok(BenchHost {
            nodes,
            libs,
            config,
            soname_config,
            dev_root,
            driver_root,
            sys_root,
            profiles_dir,
        })
    }

    /// Writes the host config for `devices` and `libraries` whose bench profile names
    /// libraries by `names` (with its profiles dir); returns both paths.
    fn config(
        &self,
        devices: usize,
        libraries: usize,
        names: LibraryNames,
        [dev_root, driver_root, sys_root]: [&PathBuf; 3],
    ) -> Result<(PathBuf, PathBuf)> {
        let suffix = match names {
            LibraryNames::File => "",
            LibraryNames::Soname => "-soname",
        };
        let profiles = self.dir.join(format!("profiles-{libraries}{suffix}"));
        self.profiles(&profiles, libraries, names)?;
        let config = self
            .dir
            .join(format!("config-{devices}-{libraries}{suffix}.toml"));
        write_config(&config, &profiles, dev_root, driver_root, sys_root, "")?;
        // The default log level, as an installed node runs: the test harness's `info` would time
        // log formatting too.
        let text = std::fs::read_to_string(&config)?
            .replace("log_level = \"info\"", "log_level = \"warn\"");
        std::fs::write(&config, text)?;
        Ok((config, profiles))
    }

    fn dev_root(&self, root: &Path, devices: usize) -> Result<Vec<BenchNode>> {
        let dir = root.join(PROFILE);
        let fresh = !dir.exists();
        std::fs::create_dir_all(&dir)?;
        let mut nodes = Vec::with_capacity(devices);
        for i in 0..devices {
            let minor = u32::try_from(i).context("device count")?;
            let name = format!("accel{i}");
            let host_path = dir.join(&name);
            if fresh {
                mknod(&host_path, MAJOR, minor, "0666")?;
            }
            nodes.push(BenchNode {
                host_path,
                container_path: format!("/dev/{PROFILE}/{name}"),
                minor,
            });
        }
        Ok(nodes)
    }

    fn driver_root(&self, root: &Path, libraries: usize) -> Result<Vec<BenchLib>> {
        let dir = root.join(LIB_DIR.trim_start_matches('/'));
        let fresh = !dir.exists();
        std::fs::create_dir_all(&dir)?;
        let mut libs = Vec::with_capacity(libraries);
        for i in 0..libraries {
            let soname = format!("libbench{i}.so.1");
            let file_name = format!("{soname}.0.0");
            let host_path = dir.join(&file_name);
            if fresh {
                run_gcc(
                    Command::new("gcc")
                        .arg("-shared")
                        .arg(format!("-Wl,-soname,{soname}"))
                        .arg("-o")
                        .arg(&host_path)
                        .arg(&self.object),
                )?;
                std::os::unix::fs::symlink(&file_name, dir.join(&soname))?;
            }
            libs.push(BenchLib {
                host_path,
                file_name,
                soname,
            });
        }
        Ok(libs)
    }

    fn profiles(&self, dir: &Path, libraries: usize, names: LibraryNames) -> Result<()> {
        if dir.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(dir)?;
        for entry in std::fs::read_dir(shipped_profiles()).context("read shipped profiles")? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "toml") {
                std::fs::copy(&path, dir.join(path.file_name().expect("file name")))?;
            }
        }
        std::fs::write(
            dir.join(format!("{PROFILE}.toml")),
            profile_text(libraries, names),
        )?;
        Ok(())
    }
}

/// The `bench` profile: every `bench/accelN` node is a device; with libraries, one glob for them,
/// named in the container by `names` (the key is written only when not the default, so that
/// binaries from before the key read the default profile too, as `--compare` and A/B runs do).
pub fn profile_text(libraries: usize, names: LibraryNames) -> String {
    let mut t = format!(
        "name = \"{PROFILE}\"\nresource = \"devinject.io/{PROFILE}\"\ndescription = \"Benchmark devices\"\n"
    );
    if names == LibraryNames::Soname {
        t.push_str("library_names = \"soname\"\n");
    }
    t.push_str(&format!(
        "[discovery]\nnodes = [\"{PROFILE}/accel[0-9]*\"]\nid = \"index\"\n"
    ));
    if libraries > 0 {
        t.push_str(&format!(
            "[[libraries]]\nglob = \"{LIB_DIR}/libbench*.so.*\"\n"
        ));
    }
    t
}

fn run_gcc(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().context("run gcc (apt-get install gcc)")?;
    if !out.status.success() {
        bail!("gcc failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}
