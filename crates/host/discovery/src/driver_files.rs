//! The driver files of a profile: its libraries, binaries and other files, resolved on the host.
//!
//! Profile paths are absolute host paths interpreted under the driver root. Symlinks are followed
//! (the host is trusted) but the result must stay under the driver root. Libraries are
//! de-duplicated by their real file, so a glob matching both `libfoo.so.1` and `libfoo.so.1.2`
//! injects one file plus its soname link.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use devinject_devices::driver_files::{DriverFile, DriverFiles, DriverLibrary};
use devinject_devices::elf_machine;
use devinject_devices::names::ProfileName;
use devinject_devices::profile::{FileSpec, Profile};
use devinject_devices::{Capabilities, HostRoots};

use crate::driver_glob::DriverGlobs;
use crate::elf_soname::read_library;

/// Why host files could not be resolved.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum ResolveError {
    /// A required library was not found.
    #[error("profile {profile}: library {what} not found under {root}: install the driver's user-space libraries or mark it optional")]
    MissingLibrary {
        profile: ProfileName,
        /// The soname or glob.
        what: String,
        /// Where it was searched.
        root: PathBuf,
    },
    /// A required binary or file was not found.
    #[error("profile {profile}: {what} not found: install it or mark it optional")]
    MissingFile {
        profile: ProfileName,
        /// The path or glob.
        what: String,
    },
    /// A path resolved outside the driver root or could not be resolved.
    #[error("profile {profile}: {path}: {problem}")]
    Path {
        profile: ProfileName,
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A required library is built for a machine this host does not run.
    #[error("profile {profile}: {path} is a library for {machine}, which this {host} host does not run: install the driver's {host} libraries, or set driver_root to where they are")]
    WrongMachine {
        profile: ProfileName,
        /// The library.
        path: PathBuf,
        /// Its machine, named.
        machine: String,
        /// This host's machine, named.
        host: String,
    },
    /// A glob pattern is invalid.
    #[error("profile {profile}: bad glob {pattern}: {message}")]
    Glob {
        profile: ProfileName,
        pattern: String,
        /// The parser's message.
        message: String,
    },
}

/// Finds all of the profile's libraries, binaries and files under the driver root (every
/// part: what a CDI spec or `doctor` lists).
pub fn resolve_driver_files(
    profile: &Profile,
    roots: &HostRoots,
) -> Result<DriverFiles, ResolveError> {
    resolve_driver_parts(profile, roots, &Capabilities::All)
}

/// Finds the profile's libraries, binaries and files of the parts in `parts` under the driver
/// root. A file tagged with a part not asked for is not looked up at all: a container start
/// pays only for what it gets (a driver's graphics, display and 32-bit parts are hundreds of
/// lookups, many failing, on every start that asks for compute alone), and a missing file of
/// such a part is no error for it.
pub fn resolve_driver_parts(
    profile: &Profile,
    roots: &HostRoots,
    parts: &Capabilities,
) -> Result<DriverFiles, ResolveError> {
    let pname = profile.name.clone();
    let mut real_paths = RealPaths::new(&roots.driver_root, &pname);
    let mut globs = DriverGlobs::default();
    let mut known: HashSet<PathBuf> = HashSet::new();
    let mut out = DriverFiles::default();
    let asked = |part: &Option<String>| parts.includes(part.as_deref());
    for lib in profile.libraries.iter().filter(|l| asked(&l.capability)) {
        let (what, candidates) = match (&lib.soname, &lib.glob) {
            (Some(soname), _) => {
                let found = profile
                    .library_dirs
                    .iter()
                    .map(|d| roots.in_driver_root(d).join(soname))
                    .find(|p| p.exists());
                (soname.clone(), found.into_iter().collect::<Vec<_>>())
            }
            (None, Some(g)) => (
                g.clone(),
                glob_paths(&mut globs, &roots.driver_root, g, &pname)?,
            ),
            (None, None) => continue,
        };
        if candidates.is_empty() {
            if lib.optional {
                tracing::debug!(profile = %pname, library = %what, "optional library not found");
                continue;
            }
            return Err(ResolveError::MissingLibrary {
                profile: pname,
                what,
                root: roots.driver_root.clone(),
            });
        }
        for c in candidates {
            // A glob finds a library twice, as its soname link and as the file: once the link
            // led to the file, the file itself (a real path already checked) needs no lookup.
            if known.contains(&c) {
                continue;
            }
            let real = real_paths.resolve(&c)?;
            if !known.insert(real.clone()) {
                continue;
            }
            let elf = read_library(&real);
            let machine = elf.as_ref().map(|e| e.machine);
            if let Some(machine) = machine.filter(|&m| !elf_machine::runs_here(m)) {
                // An optional library is one to use where it can be used.
                if lib.optional {
                    tracing::debug!(profile = %pname, library = %real.display(), machine = %elf_machine::name(machine), "optional library for another machine left out");
                    continue;
                }
                return Err(ResolveError::WrongMachine {
                    profile: pname,
                    path: real,
                    machine: elf_machine::name(machine),
                    host: elf_machine::name(elf_machine::host()),
                });
            }
            let file_name = file_name(&real);
            let soname = elf.and_then(|e| e.soname).filter(|s| *s != file_name);
            out.libraries.push(DriverLibrary {
                path: real,
                file_name,
                soname,
                capability: lib.capability.clone(),
                links: lib.links.clone(),
            });
        }
    }
    let binaries: Vec<&FileSpec> = profile
        .binaries
        .iter()
        .filter(|f| asked(&f.capability))
        .collect();
    out.binaries = resolve_files(&binaries, roots, &mut real_paths, &mut globs, |matched| {
        PathBuf::from("/usr/bin").join(file_name(matched))
    })?;
    let files: Vec<&FileSpec> = profile
        .files
        .iter()
        .filter(|f| asked(&f.capability))
        .collect();
    out.files = resolve_files(&files, roots, &mut real_paths, &mut globs, |matched| {
        Path::new("/").join(matched.strip_prefix(&roots.driver_root).unwrap_or(matched))
    })?;
    Ok(out)
}

fn resolve_files(
    specs: &[&FileSpec],
    roots: &HostRoots,
    real_paths: &mut RealPaths<'_>,
    globs: &mut DriverGlobs,
    default_dest: impl Fn(&Path) -> PathBuf,
) -> Result<Vec<DriverFile>, ResolveError> {
    let profile = real_paths.profile;
    let mut out = Vec::new();
    for spec in specs {
        let matches = glob_paths(globs, &roots.driver_root, &spec.path, profile)?;
        if matches.is_empty() {
            if spec.optional {
                continue;
            }
            return Err(ResolveError::MissingFile {
                profile: profile.clone(),
                what: spec.path.clone(),
            });
        }
        let single = matches.len() == 1;
        for m in matches {
            let real = real_paths.resolve(&m)?;
            let container_path = match &spec.container_path {
                // A destination ending in `/` is a directory: each match keeps its name there.
                Some(c) if c.ends_with('/') => PathBuf::from(c).join(file_name(&m)),
                // An explicit destination only makes sense for a single match.
                Some(c) if single => PathBuf::from(c),
                Some(c) => PathBuf::from(c).join(file_name(&m)),
                None => default_dest(&m),
            };
            if out
                .iter()
                .any(|f: &DriverFile| f.container_path == container_path)
            {
                continue;
            }
            out.push(DriverFile {
                path: real,
                container_path,
                capability: spec.capability.clone(),
            });
        }
    }
    Ok(out)
}

fn glob_paths(
    globs: &mut DriverGlobs,
    root: &Path,
    pattern: &str,
    profile: &ProfileName,
) -> Result<Vec<PathBuf>, ResolveError> {
    globs
        .matches(root, pattern)
        .map_err(|e| ResolveError::Glob {
            profile: profile.clone(),
            pattern: pattern.to_owned(),
            message: e.to_string(),
        })
}

/// Resolves candidate paths to real files under the driver root.
///
/// The hook resolves every library on every container start, and a driver ships dozens of them
/// in one directory, each found twice by a glob (the file and its soname link). Resolving each
/// path from scratch (`realpath` reads every component) cost the hook ~1,600 `readlink` calls for
/// 64 libraries. Here the driver root and each directory are canonicalized once, and a link in
/// the same directory (`libx.so.1 -> libx.so.1.2`) is followed with one `readlink`; anything else
/// falls back to a full `canonicalize`.
struct RealPaths<'a> {
    root: PathBuf,
    profile: &'a ProfileName,
    dirs: Vec<(PathBuf, PathBuf)>,
}

/// Links followed in one directory before falling back to `canonicalize`.
const MAX_LOCAL_HOPS: usize = 8;

impl<'a> RealPaths<'a> {
    fn new(root: &Path, profile: &'a ProfileName) -> Self {
        Self {
            root: std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned()),
            profile,
            dirs: Vec::new(),
        }
    }

    fn err(&self, p: &Path, problem: String) -> ResolveError {
        ResolveError::Path {
            profile: self.profile.clone(),
            path: p.to_owned(),
            problem,
        }
    }

    fn canonical_dir(&mut self, dir: &Path) -> std::io::Result<PathBuf> {
        if let Some((_, c)) = self.dirs.iter().find(|(d, _)| d == dir) {
            return Ok(c.clone());
        }
        let c = std::fs::canonicalize(dir)?;
        self.dirs.push((dir.to_owned(), c.clone()));
        Ok(c)
    }

    /// The real regular file `p` names, which must be under the driver root.
    fn resolve(&mut self, p: &Path) -> Result<PathBuf, ResolveError> {
        let cannot = |e: std::io::Error| format!("cannot resolve: {e}");
        let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
            return Err(self.err(p, "is not a file path".into()));
        };
        let dir = self
            .canonical_dir(parent)
            .map_err(|e| self.err(p, cannot(e)))?;
        let mut name = name.to_owned();
        let mut resolved = None;
        for _ in 0..MAX_LOCAL_HOPS {
            let here = dir.join(&name);
            let meta = std::fs::symlink_metadata(&here).map_err(|e| self.err(p, cannot(e)))?;
            if !meta.file_type().is_symlink() {
                resolved = Some((here, meta.is_file()));
                break;
            }
            let target = std::fs::read_link(&here).map_err(|e| self.err(p, cannot(e)))?;
            let mut comps = target.components();
            match (comps.next(), comps.next()) {
                (Some(std::path::Component::Normal(n)), None) => name = n.to_owned(),
                _ => break,
            }
        }
        let (real, is_file) = match resolved {
            Some(r) => r,
            None => {
                let real = std::fs::canonicalize(p).map_err(|e| self.err(p, cannot(e)))?;
                let is_file = real.is_file();
                (real, is_file)
            }
        };
        if !real.starts_with(&self.root) {
            return Err(self.err(
                p,
                format!(
                    "resolves to {} outside the driver root {}: fix the link or the driver root",
                    real.display(),
                    self.root.display()
                ),
            ));
        }
        if !is_file {
            return Err(self.err(p, "is not a regular file".into()));
        }
        Ok(real)
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(extra: &str) -> Profile {
        let text = format!(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\nlibrary_dirs = [\"/lib\"]\n[discovery]\nnodes = [\"x\"]\n{extra}"
        );
        Profile::parse(&text, Path::new("demo.toml")).unwrap()
    }

    fn roots(driver_root: &Path) -> HostRoots {
        HostRoots {
            driver_root: driver_root.to_owned(),
            ..HostRoots::default()
        }
    }

    #[test]
    fn glob_dedups_symlinks_to_one_real_file() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::write(lib.join("libdemo.so.1.0.0"), b"not elf").unwrap();
        std::os::unix::fs::symlink("libdemo.so.1.0.0", lib.join("libdemo.so.1")).unwrap();
        let p = profile("[[libraries]]\nglob = \"/lib/libdemo.so.*\"\n");
        let files = resolve_driver_files(&p, &roots(dir.path())).unwrap();
        assert_eq!(files.libraries.len(), 1);
        assert_eq!(files.libraries[0].file_name, "libdemo.so.1.0.0");
    }

    #[test]
    fn a_destination_ending_in_a_slash_is_a_directory_even_for_one_match() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        std::fs::write(dir.path().join("x/libglx.so.535.1"), b"").unwrap();
        let files = |dest: &str| {
            let p = profile(&format!(
                "[[files]]\npath = \"/x/libglx.so.*\"\ncontainer_path = {dest:?}\ncapability = \"display\"\n[capabilities]\nenv = \"C\"\nnames = [\"display\"]\n"
            ));
            resolve_driver_files(&p, &roots(dir.path())).unwrap().files
        };
        let one = files("/usr/lib/ext/");
        assert_eq!(
            one[0].container_path,
            Path::new("/usr/lib/ext/libglx.so.535.1")
        );
        assert_eq!(one[0].capability.as_deref(), Some("display"));
        assert_eq!(
            files("/usr/lib/ext")[0].container_path,
            Path::new("/usr/lib/ext")
        );
    }

    #[test]
    fn parts_not_asked_for_are_not_looked_up() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/libcompute.so.1"), b"").unwrap();
        std::fs::write(dir.path().join("lib/tool"), b"").unwrap();
        // The graphics part's library and file are missing and required: an error only for a
        // container that asks for graphics.
        let p = profile(
            "[[libraries]]\nsoname = \"libcompute.so.1\"\ncapability = \"compute\"\n\
             [[libraries]]\nsoname = \"libgl.so.1\"\ncapability = \"graphics\"\n\
             [[binaries]]\npath = \"/lib/tool\"\ncapability = \"compute\"\n\
             [[files]]\npath = \"/lib/gl.json\"\ncapability = \"graphics\"\n\
             [capabilities]\nenv = \"C\"\nnames = [\"compute\", \"graphics\"]\n",
        );
        let compute = Capabilities::Only(["compute".to_owned()].into());
        let files = resolve_driver_parts(&p, &roots(dir.path()), &compute).unwrap();
        let names: Vec<&str> = files
            .libraries
            .iter()
            .map(|l| l.file_name.as_str())
            .collect();
        assert_eq!(names, ["libcompute.so.1"]);
        assert_eq!(files.binaries.len(), 1);
        assert!(files.files.is_empty());
        let err = resolve_driver_parts(&p, &roots(dir.path()), &Capabilities::All)
            .unwrap_err()
            .to_string();
        assert!(err.contains("libgl.so.1"), "{err}");
    }

    #[test]
    fn soname_lookup_and_optional_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/libx.so.1"), b"").unwrap();
        let p = profile(
            "[[libraries]]\nsoname = \"libx.so.1\"\n[[libraries]]\nsoname = \"liby.so.1\"\noptional = true\n",
        );
        let files = resolve_driver_files(&p, &roots(dir.path())).unwrap();
        assert_eq!(files.libraries.len(), 1);
        let p = profile("[[libraries]]\nsoname = \"liby.so.1\"\n");
        let err = resolve_driver_files(&p, &roots(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("liby.so.1"), "{err}");
    }

    #[test]
    fn links_leaving_the_driver_root_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("lib/libz.so.1")).unwrap();
        let p = profile("[[libraries]]\nsoname = \"libz.so.1\"\n");
        let err = resolve_driver_files(&p, &roots(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the driver root"), "{err}");
    }

    #[test]
    fn link_chains_symlinked_dirs_and_loops_resolve_like_canonicalize() {
        let dir = tempfile::tempdir().unwrap();
        let real_dir = dir.path().join("real");
        std::fs::create_dir(&real_dir).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("lib")).unwrap();
        std::fs::write(real_dir.join("liba.so.1.2.3"), b"").unwrap();
        std::os::unix::fs::symlink("liba.so.1.2.3", real_dir.join("liba.so.1.2")).unwrap();
        std::os::unix::fs::symlink("liba.so.1.2", real_dir.join("liba.so.1")).unwrap();
        std::os::unix::fs::symlink("../real/liba.so.1.2.3", real_dir.join("liba.so")).unwrap();
        std::os::unix::fs::symlink("libloop.so.2", real_dir.join("libloop.so.1")).unwrap();
        std::os::unix::fs::symlink("libloop.so.1", real_dir.join("libloop.so.2")).unwrap();
        std::fs::create_dir(real_dir.join("libdir.so.1")).unwrap();
        let name = ProfileName::new("demo").unwrap();
        let mut r = RealPaths::new(dir.path(), &name);
        for link in ["liba.so.1", "liba.so.1.2", "liba.so", "liba.so.1.2.3"] {
            let p = dir.path().join("lib").join(link);
            assert_eq!(
                r.resolve(&p).unwrap(),
                std::fs::canonicalize(&p).unwrap(),
                "{link}"
            );
        }
        let err = r.resolve(&dir.path().join("lib/libloop.so.1")).unwrap_err();
        assert!(err.to_string().contains("cannot resolve"), "{err}");
        let err = r.resolve(&dir.path().join("lib/libdir.so.1")).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = r.resolve(&dir.path().join("lib/missing.so")).unwrap_err();
        assert!(err.to_string().contains("cannot resolve"), "{err}");
    }

    #[test]
    fn a_soname_is_recorded_only_when_it_differs_from_the_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        let elf = crate::elf_soname::tests::shared_object;
        std::fs::write(lib.join("libdemo.so.1.0.0"), elf("libdemo.so.1")).unwrap();
        std::fs::write(lib.join("libsame.so.2"), elf("libsame.so.2")).unwrap();
        let p = profile(
            "[[libraries]]\nsoname = \"libdemo.so.1.0.0\"\n[[libraries]]\nsoname = \"libsame.so.2\"\n",
        );
        let files = resolve_driver_files(&p, &roots(dir.path())).unwrap();
        let got: Vec<_> = files
            .libraries
            .iter()
            .map(|l| (l.file_name.as_str(), l.soname.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("libdemo.so.1.0.0", Some("libdemo.so.1")),
                ("libsame.so.2", None)
            ]
        );
    }

    /// A library built for a machine this host does not run (an x86-64 driver copied onto an
    /// arm64 node, or the reverse) is refused, naming the file, its machine and the host's, where
    /// it would otherwise be mounted and then skipped by ld.so; an optional one is left out, and
    /// the host's 32-bit companion (a `compat32` library) is taken.
    #[test]
    fn a_library_of_another_machine_is_refused_or_left_out_if_optional() {
        use devinject_devices::elf_machine::{companion, host, name, EM_AARCH64, EM_X86_64};
        let other = if host() == EM_AARCH64 {
            EM_X86_64
        } else {
            EM_AARCH64
        };
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        let elf = crate::elf_soname::tests::shared_object_for;
        std::fs::write(lib.join("libother.so.1"), elf("libother.so.1", other, true)).unwrap();
        let required = profile("[[libraries]]\nsoname = \"libother.so.1\"\n");
        let err = resolve_driver_files(&required, &roots(dir.path())).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "profile demo: {} is a library for {}, which this {} host does not run: install \
                 the driver's {} libraries, or set driver_root to where they are",
                lib.join("libother.so.1").display(),
                name(other),
                name(host()),
                name(host())
            )
        );
        let optional = profile("[[libraries]]\nsoname = \"libother.so.1\"\noptional = true\n");
        let files = resolve_driver_files(&optional, &roots(dir.path())).unwrap();
        assert!(files.libraries.is_empty(), "{files:?}");
        if let Some(c) = companion() {
            std::fs::write(lib.join("lib32.so.1"), elf("lib32.so.1", c, false)).unwrap();
            let compat = profile("[[libraries]]\nsoname = \"lib32.so.1\"\n");
            let files = resolve_driver_files(&compat, &roots(dir.path())).unwrap();
            assert_eq!(files.libraries.len(), 1, "{files:?}");
        }
    }

    /// A `container_path` is the destination of a spec that matches one file, and the directory
    /// of each match when a glob matches several; two files bound for one place keep the first.
    #[test]
    fn explicit_destinations_and_collisions() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("opt/demo/fw")).unwrap();
        std::fs::create_dir_all(dir.path().join("opt/other/bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("opt/demo/bin")).unwrap();
        for f in [
            "opt/demo/fw/a.bin",
            "opt/demo/fw/b.bin",
            "opt/demo/one.conf",
            "opt/demo/bin/demo-smi",
            "opt/other/bin/demo-smi",
        ] {
            std::fs::write(dir.path().join(f), f).unwrap();
        }
        let p = profile(concat!(
            "[[files]]\npath = \"/opt/demo/fw/*.bin\"\ncontainer_path = \"/lib/firmware/demo\"\n",
            "[[files]]\npath = \"/opt/demo/one.conf\"\ncontainer_path = \"/etc/demo.conf\"\n",
            "[[binaries]]\npath = \"/opt/demo/bin/demo-smi\"\n",
            "[[binaries]]\npath = \"/opt/other/bin/demo-smi\"\n",
        ));
        let files = resolve_driver_files(&p, &roots(dir.path())).unwrap();
        let dest = |v: &[DriverFile]| -> Vec<PathBuf> {
            v.iter().map(|f| f.container_path.clone()).collect()
        };
        assert_eq!(
            dest(&files.files),
            [
                PathBuf::from("/lib/firmware/demo/a.bin"),
                PathBuf::from("/lib/firmware/demo/b.bin"),
                PathBuf::from("/etc/demo.conf"),
            ]
        );
        assert_eq!(dest(&files.binaries), [PathBuf::from("/usr/bin/demo-smi")]);
        assert!(
            files.binaries[0].path.ends_with("opt/demo/bin/demo-smi"),
            "the first one is kept: {:?}",
            files.binaries[0].path
        );
    }

    #[test]
    fn binaries_go_to_usr_bin_and_files_keep_their_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("opt/demo/bin")).unwrap();
        std::fs::write(dir.path().join("opt/demo/bin/demo-smi"), b"").unwrap();
        std::fs::write(dir.path().join("opt/demo/fw.bin"), b"").unwrap();
        let p = profile(
            "[[binaries]]\npath = \"/opt/demo/bin/demo-smi\"\n[[files]]\npath = \"/opt/demo/fw.bin\"\n",
        );
        let files = resolve_driver_files(&p, &roots(dir.path())).unwrap();
        assert_eq!(
            files.binaries[0].container_path,
            PathBuf::from("/usr/bin/demo-smi")
        );
        assert_eq!(
            files.files[0].container_path,
            PathBuf::from("/opt/demo/fw.bin")
        );
    }
}
