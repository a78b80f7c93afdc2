//! A directory of profiles, loaded together.

use std::path::Path;

use crate::profile::{Profile, ProfileError};

/// All profiles from one directory, sorted by name.
#[derive(Debug, Clone, Default)]
pub struct ProfileSet {
    profiles: Vec<Profile>,
}

impl ProfileSet {
    /// Loads every `*.toml` file in `dir`. Any invalid profile fails the whole load, so a typo
    /// never silently disables a device kind. Two profiles claiming the same request variable or
    /// resource are an error too.
    pub fn load_dir(dir: &Path) -> Result<Self, ProfileError> {
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
                    None
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
    fn missing_dir_names_the_path() {
        let err = ProfileSet::load_dir(Path::new("/nonexistent/profiles"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/profiles"), "{err}");
    }
}
