//! The profiles of one directory, together: each has its own request variable, resource and
//! friendly names. The devinject-discovery crate loads them from disk (`profile_dir::load`).

use std::path::Path;

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

/// The request variables a profile text names besides the default one, when that can be told
/// without parsing: its top-level part (before the first `[table]`) only has blank lines,
/// comments, single-line values of keys that do not name a variable, and `request_env` as a
/// plain string of env-name characters. `None`: it cannot be told, parse it.
pub fn request_variables(text: &str) -> Option<Vec<String>> {
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
