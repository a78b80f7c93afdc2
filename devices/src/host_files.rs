//! Resolving a profile's libraries, binaries and files on the host.
//!
//! Profile paths are absolute host paths interpreted under the driver root. Symlinks are followed
//! (the host is trusted) but the result must stay under the driver root. Libraries are
//! de-duplicated by their real file, so a glob matching both `libfoo.so.1` and `libfoo.so.1.2`
//! injects one file plus its soname link.

use std::path::{Path, PathBuf};

use crate::elf_soname::read_soname;
use crate::profile::{FileSpec, Profile};
use crate::roots::HostRoots;

/// Why host files could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A required library was not found.
    #[error("profile {profile}: library {what} not found under {root}: install the driver's user-space libraries or mark it optional")]
    MissingLibrary {
        /// The profile.
        profile: String,
        /// The soname or glob.
        what: String,
        /// Where it was searched.
        root: PathBuf,
    },
    /// A required binary or file was not found.
    #[error("profile {profile}: {what} not found: install it or mark it optional")]
    MissingFile {
        /// The profile.
        profile: String,
        /// The path or glob.
        what: String,
    },
    /// A path resolved outside the driver root or could not be resolved.
    #[error("profile {profile}: {path}: {problem}")]
    Path {
        /// The profile.
        profile: String,
        /// The path.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A glob pattern is invalid.
    #[error("profile {profile}: bad glob {pattern}: {message}")]
    Glob {
        /// The profile.
        profile: String,
        /// The pattern.
        pattern: String,
        /// The parser's message.
        message: String,
    },
}

/// A library found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLibrary {
    /// The real file (symlinks resolved).
    pub path: PathBuf,
    /// Its file name, used in the container's lib dir.
    pub file_name: String,
    /// Its `DT_SONAME`, when it has one that differs from the file name.
    pub soname: Option<String>,
}

/// A binary or other file found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// The real file (symlinks resolved).
    pub path: PathBuf,
    /// Where it goes in the container.
    pub container_path: PathBuf,
}

/// Everything the profile injects besides device nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFiles {
    /// Libraries, in profile order.
    pub libraries: Vec<HostLibrary>,
    /// Binaries.
    pub binaries: Vec<HostFile>,
    /// Other files.
    pub files: Vec<HostFile>,
}

/// Finds the profile's libraries, binaries and files under the driver root.
pub fn resolve_host_files(profile: &Profile, roots: &HostRoots) -> Result<HostFiles, ResolveError> {
    let pname = profile.name.to_string();
    let mut out = HostFiles::default();
    for lib in &profile.libraries {
        let (what, candidates) = match (&lib.soname, &lib.glob) {
            (Some(soname), _) => {
                let found = profile
                    .library_dirs
                    .iter()
                    .map(|d| roots.in_driver_root(d).join(soname))
                    .find(|p| p.exists());
                (soname.clone(), found.into_iter().collect::<Vec<_>>())
            }
            (None, Some(g)) => (g.clone(), glob_paths(&roots.driver_root, g, &pname)?),
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
            let real = real_path(&c, &roots.driver_root, &pname)?;
            if out.libraries.iter().any(|l| l.path == real) {
                continue;
            }
            let file_name = file_name(&real);
            let soname = read_soname(&real).filter(|s| *s != file_name);
            out.libraries.push(HostLibrary {
                path: real,
                file_name,
                soname,
            });
        }
    }
    out.binaries = resolve_files(&profile.binaries, roots, &pname, |matched| {
        PathBuf::from("/usr/bin").join(file_name(matched))
    })?;
    out.files = resolve_files(&profile.files, roots, &pname, |matched| {
        Path::new("/").join(matched.strip_prefix(&roots.driver_root).unwrap_or(matched))
    })?;
    Ok(out)
}

fn resolve_files(
    specs: &[FileSpec],
    roots: &HostRoots,
    profile: &str,
    default_dest: impl Fn(&Path) -> PathBuf,
) -> Result<Vec<HostFile>, ResolveError> {
    let mut out = Vec::new();
    for spec in specs {
        let matches = glob_paths(&roots.driver_root, &spec.path, profile)?;
        if matches.is_empty() {
            if spec.optional {
                continue;
            }
            return Err(ResolveError::MissingFile {
                profile: profile.to_owned(),
                what: spec.path.clone(),
            });
        }
        let single = matches.len() == 1;
        for m in matches {
            let real = real_path(&m, &roots.driver_root, profile)?;
            let container_path = match &spec.container_path {
                // An explicit destination only makes sense for a single match.
                Some(c) if single => PathBuf::from(c),
                Some(c) => PathBuf::from(c).join(file_name(&m)),
                None => default_dest(&m),
            };
            if out
                .iter()
                .any(|f: &HostFile| f.container_path == container_path)
            {
                continue;
            }
            out.push(HostFile {
                path: real,
                container_path,
            });
        }
    }
    Ok(out)
}

fn glob_paths(root: &Path, pattern: &str, profile: &str) -> Result<Vec<PathBuf>, ResolveError> {
    let full = format!(
        "{}/{}",
        glob::Pattern::escape(root.to_string_lossy().trim_end_matches('/')),
        pattern.trim_start_matches('/')
    );
    let paths = glob::glob(&full).map_err(|e| ResolveError::Glob {
        profile: profile.to_owned(),
        pattern: full.clone(),
        message: e.to_string(),
    })?;
    let mut v: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
    v.sort();
    Ok(v)
}

fn real_path(p: &Path, root: &Path, profile: &str) -> Result<PathBuf, ResolveError> {
    let real = std::fs::canonicalize(p).map_err(|e| ResolveError::Path {
        profile: profile.to_owned(),
        path: p.to_owned(),
        problem: format!("cannot resolve: {e}"),
    })?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    if !real.starts_with(&root) {
        return Err(ResolveError::Path {
            profile: profile.to_owned(),
            path: p.to_owned(),
            problem: format!(
                "resolves to {} outside the driver root {}: fix the link or the driver root",
                real.display(),
                root.display()
            ),
        });
    }
    if !real.is_file() {
        return Err(ResolveError::Path {
            profile: profile.to_owned(),
            path: p.to_owned(),
            problem: "is not a regular file".into(),
        });
    }
    Ok(real)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

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
        let files = resolve_host_files(&p, &roots(dir.path())).unwrap();
        assert_eq!(files.libraries.len(), 1);
        assert_eq!(files.libraries[0].file_name, "libdemo.so.1.0.0");
    }

    #[test]
    fn soname_lookup_and_optional_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib/libx.so.1"), b"").unwrap();
        let p = profile(
            "[[libraries]]\nsoname = \"libx.so.1\"\n[[libraries]]\nsoname = \"liby.so.1\"\noptional = true\n",
        );
        let files = resolve_host_files(&p, &roots(dir.path())).unwrap();
        assert_eq!(files.libraries.len(), 1);
        let p = profile("[[libraries]]\nsoname = \"liby.so.1\"\n");
        let err = resolve_host_files(&p, &roots(dir.path()))
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
        let err = resolve_host_files(&p, &roots(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the driver root"), "{err}");
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
        let files = resolve_host_files(&p, &roots(dir.path())).unwrap();
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
