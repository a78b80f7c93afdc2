//! A directory of profiles, loaded together.

use std::path::{Path, PathBuf};

use crate::names::DEFAULT_REQUEST_SUFFIX;
use crate::profile::{Profile, ProfileError};

/// Where every component reads the profiles unless told otherwise (the installer puts them
/// there; the host configuration's `profiles_dir` and the binaries' `--profiles-dir` move it).
pub const DEFAULT_PROFILES_DIR: &str = "/etc/devinject/profiles";

/// All profiles from one directory, sorted by name.
#[derive(Debug, Clone, Default)]
pub struct ProfileSet {
    profiles: Vec<Profile>,
}

impl ProfileSet {
    /// Whether a container could be asking for a profile in `dir`, told without parsing the
    /// profiles: `mentions(needle)` says whether the container's env names or annotation keys
    /// (or its raw spec) contain `needle`.
    ///
    /// The hook and the shim run for every container, and most ask for nothing; parsing every
    /// profile to find that out was ~0.5 ms of each start. A container can only ask through our
    /// annotation prefix or a profile's request variable, and a request variable is the default
    /// `<NAME>_VISIBLE_DEVICES` unless the profile sets `request_env`. So the answer is yes when
    /// the container mentions the prefix or that suffix, or when a profile's top-level keys (the
    /// lines before its first `[table]`) hold anything but a single-line `name`, `resource`,
    /// `description`, `replicas`, `allocate_mode`, `library_dirs`, `library_names` or a plain
    /// `request_env` the container does not mention: a misspelt key, a quoted key or a
    /// multi-line value. A yes means [`ProfileSet::load_dir`] follows,
    /// which parses everything as strictly as ever; only profiles of containers that cannot be
    /// asking are left unparsed. A `request_env` written as a plain single-line string is read
    /// here too: the answer is yes when the container mentions it.
    pub fn may_be_requested(
        dir: &Path,
        mentions: impl Fn(&str) -> bool,
    ) -> Result<bool, ProfileError> {
        if mentions(crate::plan::ANNOTATION_PREFIX) || mentions(DEFAULT_REQUEST_SUFFIX) {
            return Ok(true);
        }
        for path in toml_files(dir)? {
            let text = crate::profile_file::read(&path)?;
            match request_variables(&text) {
                Some(vars) if !vars.iter().any(|v| mentions(v)) => {}
                _ => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Loads every `*.toml` file in `dir`. Any invalid profile fails the whole load, so a typo
    /// never silently disables a device kind. Two profiles claiming the same request variable or
    /// resource are an error too.
    pub fn load_dir(dir: &Path) -> Result<Self, ProfileError> {
        let paths = toml_files(dir)?;
        let profiles = paths
            .iter()
            .map(|p| Profile::load(p))
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_profiles(profiles, dir)
    }

    /// Builds a set from already-loaded profiles, checking they do not collide.
    pub fn from_profiles(mut profiles: Vec<Profile>, origin: &Path) -> Result<Self, ProfileError> {
        profiles.sort_by(|a, b| a.name.cmp(&b.name));
        for (i, a) in profiles.iter().enumerate() {
            for b in &profiles[i + 1..] {
                let clash = if a.request_env == b.request_env {
                    Some(("request_env", a.request_env.clone()))
                } else if a.resource == b.resource {
                    Some(("resource", a.resource.to_string()))
                } else {
                    b.resource_names()
                        .find(|n| a.resource_names().any(|m| m == *n))
                        .map(|name| ("prepare.functions.resource", name.to_owned()))
                };
                if let Some((key, value)) = clash {
                    return Err(ProfileError::Invalid {
                        path: origin.join(format!("{}.toml", b.name)),
                        key: key.into(),
                        problem: format!(
                            "{value:?} is also used by profile {}: each profile needs its own",
                            a.name
                        ),
                    });
                }
            }
        }
        Ok(Self { profiles })
    }

    /// The profiles, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Profile> {
        self.profiles.iter()
    }

    /// The profile called `name`.
    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name.as_str() == name)
    }

    /// How many profiles there are.
    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    /// True when the directory held no profile.
    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }
}

/// The `*.toml` files in `dir`, sorted.
fn toml_files(dir: &Path) -> Result<Vec<PathBuf>, ProfileError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ProfileError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ProfileError::Read {
            path: dir.to_owned(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// The request variables a profile text names besides the default one, when that can be told
/// without parsing: its top-level part (before the first `[table]`) only has blank lines,
/// comments, single-line values of keys that do not name a variable, and `request_env` as a
/// plain string of env-name characters. `None`: it cannot be told, parse it.
fn request_variables(text: &str) -> Option<Vec<String>> {
    const KEYS: [&str; 7] = [
        "name",
        "resource",
        "description",
        "replicas",
        "allocate_mode",
        "library_dirs",
        "library_names",
    ];
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            return Some(out);
        }
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let (key, value) = t.split_once('=')?;
        let (key, value) = (key.trim(), value.trim());
        if key == "request_env" {
            let (name, rest) = value.strip_prefix('"')?.split_once('"')?;
            let rest = rest.trim();
            if !crate::profile::is_env_name(name) || !(rest.is_empty() || rest.starts_with('#')) {
                return None;
            }
            out.push(name.to_owned());
            continue;
        }
        let multi_line = value.starts_with("\"\"\"")
            || value.starts_with("'''")
            || (value.starts_with('[') && !value.contains(']'));
        if !KEYS.contains(&key) || multi_line {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, env: &str) {
        let text = format!(
            "name = \"{name}\"\nresource = \"devinject.io/{name}\"\nrequest_env = \"{env}\"\n[discovery]\nnodes = [\"{name}\"]\n"
        );
        std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
    }

    #[test]
    fn loads_sorted_and_ignores_other_files() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "kvm", "KVM_VISIBLE_DEVICES");
        write(dir.path(), "fuse", "FUSE_VISIBLE_DEVICES");
        std::fs::write(dir.path().join("README.md"), "x").unwrap();
        let set = ProfileSet::load_dir(dir.path()).unwrap();
        let names: Vec<_> = set.iter().map(|p| p.name.to_string()).collect();
        assert_eq!(names, ["fuse", "kvm"]);
        assert!(set.get("kvm").is_some());
        assert_eq!((set.len(), set.is_empty()), (2, false));
        let empty = tempfile::tempdir().unwrap();
        let set = ProfileSet::load_dir(empty.path()).unwrap();
        assert_eq!((set.len(), set.is_empty()), (0, true));
    }

    #[test]
    fn containers_that_cannot_be_asking_leave_profiles_unparsed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kvm.toml"),
            "# kvm\nname = \"kvm\"\nresource = \"devinject.io/kvm\"\n\n[discovery]\nnodes = [\"kvm\"]\nrequest_env = \"IGNORED_IN_A_TABLE\"\n",
        )
        .unwrap();
        let says =
            |words: &'static [&'static str]| move |n: &str| words.iter().any(|w| w.contains(n));
        let may = |words| ProfileSet::may_be_requested(dir.path(), says(words)).unwrap();
        assert!(!may(&["PATH", "HOME", "io.kubernetes.pod.uid"]));
        assert!(may(&["KVM_VISIBLE_DEVICES"]));
        assert!(may(&["devinject.io/kvm.devices"]));
        // Anything at the top level that could name another variable means a real parse.
        // A plain request variable is looked for in the container.
        std::fs::write(
            dir.path().join("x.toml"),
            "name = \"x\"\nrequest_env = \"X_GPUS\" # NVIDIA-style\n[discovery]\nnodes = [\"x\"]\n",
        )
        .unwrap();
        assert!(!may(&["PATH"]));
        assert!(may(&["X_GPUS"]));
        for text in [
            "name = \"x\"\nrequest_env = 'X_GPUS'\n",
            "name = \"x\"\nrequest_env = \"X_GPUS\" extra\n",
            "name = \"x\"\nrequest_env = \"X-GPUS\"\n",
            "name = \"x\"\nrequst_env = \"X_GPUS\"\n",
            "\"request_env\" = \"X_GPUS\"\n",
            "name = \"x\"\nlibrary_dirs = [\n  \"/lib\",\n]\n",
            "description = \"\"\"\nmany\nlines\"\"\"\n",
            // A line of a multi-line value that looks like a table does not end the top level.
            "description = \"\"\"\n[not a table]\n\"\"\"\nrequest_env = \"X_GPUS\"\n",
            "description = '''\n[not a table]\n'''\nrequest_env = \"X_GPUS\"\n",
            "library_dirs = [\n[\"/lib\"],\n]\nrequest_env = \"X_GPUS\"\n",
        ] {
            std::fs::write(dir.path().join("x.toml"), text).unwrap();
            assert!(may(&["PATH"]), "{text}");
        }
        // A single-line array is a single-line value.
        std::fs::write(
            dir.path().join("x.toml"),
            "name = \"x\"\nlibrary_dirs = [\"/lib\"]\n[discovery]\nnodes = [\"x\"]\n",
        )
        .unwrap();
        assert!(!may(&["PATH"]));
        // Nor does the choice of library names make the profiles of a container that asks for
        // nothing be parsed.
        std::fs::write(
            dir.path().join("x.toml"),
            "name = \"x\"\nlibrary_names = \"soname\"\n[discovery]\nnodes = [\"x\"]\n",
        )
        .unwrap();
        assert!(!may(&["PATH"]));
        assert!(ProfileSet::may_be_requested(Path::new("/nonexistent"), |_| false).is_err());
    }

    #[test]
    fn every_shipped_profiles_request_variable_is_told_without_parsing() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles");
        for path in toml_files(&dir).unwrap() {
            let text = std::fs::read_to_string(&path).unwrap();
            let p = Profile::load(&path).unwrap();
            let vars = request_variables(&text).unwrap_or_else(|| panic!("{}", path.display()));
            assert!(
                p.request_env() == p.name.default_request_env()
                    || vars == [p.request_env().to_owned()],
                "{}",
                path.display()
            );
        }
    }

    #[test]
    fn clashing_request_env_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "kvm", "X_VISIBLE_DEVICES");
        write(dir.path(), "fuse", "X_VISIBLE_DEVICES");
        let err = ProfileSet::load_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("request_env") && err.contains("fuse"), "{err}");
    }

    #[test]
    fn a_friendly_name_belongs_to_one_profile() {
        let dir = tempfile::tempdir().unwrap();
        let profile = |name: &str, resource: &str, friendly: &str| {
            let text = format!(
                "name = \"{name}\"\nresource = \"{resource}\"\n[discovery]\nnodes = [\"{name}\"]\n[prepare]\ncommand = [\"/bin/p\"]\nfunctions = [{{ id = \"f\", resource = \"{friendly}\" }}]\n"
            );
            std::fs::write(dir.path().join(format!("{name}.toml")), text).unwrap();
        };
        profile("fpga-a", "x.io/a", "x.io/nlb");
        profile("fpga-b", "x.io/b", "x.io/other");
        assert!(ProfileSet::load_dir(dir.path()).is_ok());
        for (b_resource, b_friendly) in [
            ("x.io/b", "x.io/nlb"),
            ("x.io/b", "x.io/a"),
            ("x.io/nlb", "x.io/c"),
        ] {
            profile("fpga-b", b_resource, b_friendly);
            let err = ProfileSet::load_dir(dir.path()).unwrap_err().to_string();
            assert!(
                err.contains("prepare.functions.resource")
                    && err.contains("also used by profile fpga-a"),
                "{err}"
            );
        }
    }

    #[test]
    fn missing_dir_names_the_path() {
        let err = ProfileSet::load_dir(Path::new("/nonexistent/profiles"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/profiles"), "{err}");
    }
}
