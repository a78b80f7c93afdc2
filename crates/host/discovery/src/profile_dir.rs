//! A directory of profiles, loaded together: every `*.toml` file in it, each read through
//! [`crate::profile_file`], into a [`ProfileSet`] whose profiles do not collide.

use std::path::{Path, PathBuf};

use devinject_devices::names::DEFAULT_REQUEST_SUFFIX;
use devinject_devices::plan::ANNOTATION_PREFIX;
use devinject_devices::profile::ProfileError;
use devinject_devices::profile_set::request_variables;
use devinject_devices::ProfileSet;

use crate::profile_file;

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
/// multi-line value. A yes means [`load`] follows,
/// which parses everything as strictly as ever; only profiles of containers that cannot be
/// asking are left unparsed. A `request_env` written as a plain single-line string is read
/// here too: the answer is yes when the container mentions it.
pub fn may_be_requested(dir: &Path, mentions: impl Fn(&str) -> bool) -> Result<bool, ProfileError> {
    if mentions(ANNOTATION_PREFIX) || mentions(DEFAULT_REQUEST_SUFFIX) {
        return Ok(true);
    }
    for path in toml_files(dir)? {
        let text = profile_file::read(&path)?;
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
pub fn load(dir: &Path) -> Result<ProfileSet, ProfileError> {
    let paths = toml_files(dir)?;
    let profiles = paths
        .iter()
        .map(|p| profile_file::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    ProfileSet::from_profiles(profiles, dir)
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
        let set = load(dir.path()).unwrap();
        let names: Vec<_> = set.iter().map(|p| p.name.to_string()).collect();
        assert_eq!(names, ["fuse", "kvm"]);
        assert!(set.get("kvm").is_some());
        assert_eq!((set.len(), set.is_empty()), (2, false));
        let empty = tempfile::tempdir().unwrap();
        let set = load(empty.path()).unwrap();
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
        let may = |words| may_be_requested(dir.path(), says(words)).unwrap();
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
        assert!(may_be_requested(Path::new("/nonexistent"), |_| false).is_err());
    }

    #[test]
    fn every_shipped_profiles_request_variable_is_told_without_parsing() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles");
        for path in toml_files(&dir).unwrap() {
            let text = std::fs::read_to_string(&path).unwrap();
            let p = profile_file::load(&path).unwrap();
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
        let err = load(dir.path()).unwrap_err().to_string();
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
        assert!(load(dir.path()).is_ok());
        for (b_resource, b_friendly) in [
            ("x.io/b", "x.io/nlb"),
            ("x.io/b", "x.io/a"),
            ("x.io/nlb", "x.io/c"),
        ] {
            profile("fpga-b", b_resource, b_friendly);
            let err = load(dir.path()).unwrap_err().to_string();
            assert!(
                err.contains("prepare.functions.resource")
                    && err.contains("also used by profile fpga-a"),
                "{err}"
            );
        }
    }

    #[test]
    fn missing_dir_names_the_path() {
        let err = load(Path::new("/nonexistent/profiles"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/profiles"), "{err}");
    }

    /// Every consumer loads profiles through [`profile_file::load`]: a directory holding a
    /// shared profile with a prepare step fails to load as a whole, naming the file.
    #[test]
    fn a_shared_device_with_a_prepare_step_does_not_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("demo.toml"),
            "replicas = 2\nname = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\n[prepare]\ncommand = [\"/opt/p\"]\nfunctions = [{ id = \"nlb3\" }]\n",
        )
        .unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(matches!(err, ProfileError::SharedPrepare { .. }), "{err}");
        assert!(
            err.to_string()
                .contains(&dir.path().join("demo.toml").display().to_string()),
            "{err}"
        );
    }
}
