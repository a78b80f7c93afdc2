//! How a plan's env meets the container's own: a request variable (`<NAME>_VISIBLE_DEVICES`)
//! is replaced by the granted list, since the process must see what was granted, not what it
//! asked for; any other variable the container sets is kept, since a profile's defaults do not
//! override the user's. The shim applies the rule to `config.json`, the NRI plugin writes the
//! same entries into its adjustment (one rule, not one per engine).

use crate::plan::EnvVar;

/// The value of variable `name` in `KEY=value` entries `env`: the last one wins, as the process
/// sees it after `execve`.
pub fn env_value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find_map(|e| e.strip_prefix(name)?.strip_prefix('='))
}

/// The name an entry of the container's env sets: what precedes its first `=`; an entry
/// without one sets nothing (`getenv` does not see it).
fn name(entry: &str) -> Option<&str> {
    entry.split_once('=').map(|(k, _)| k)
}

/// The entries of `granted` the container's env gets, in order: every request variable among
/// `request_envs`, and every other variable that neither the `container`'s entries nor an
/// earlier granted entry set.
pub fn env_edits<'c, 'a>(
    container: impl IntoIterator<Item = &'c str>,
    granted: &'a [EnvVar],
    request_envs: &[&str],
) -> Vec<&'a EnvVar> {
    let set: Vec<&str> = container.into_iter().filter_map(name).collect();
    let mut out: Vec<&'a EnvVar> = Vec::new();
    for var in granted {
        let k = var.name.as_str();
        let taken = set.contains(&k) || out.iter().any(|o| o.name == k);
        if request_envs.contains(&k) || !taken {
            out.push(var);
        }
    }
    out
}

/// `container` with [`env_edits`] applied: an entry replaces the first one of its name and
/// every later copy goes (the process would see the last one, and the planner read that one);
/// a new name is appended (made by `make`). `entry` reads an entry; one that is not a string
/// (`None`) stays where it is.
pub fn merge_env<T>(
    container: &mut Vec<T>,
    entry: impl Fn(&T) -> Option<&str>,
    make: impl Fn(&EnvVar) -> T,
    granted: &[EnvVar],
    request_envs: &[&str],
) {
    let edits = env_edits(container.iter().filter_map(&entry), granted, request_envs);
    for var in edits {
        let k = var.name.as_str();
        let named = |e: &T| entry(e).and_then(name) == Some(k);
        match container.iter().position(named) {
            Some(i) => {
                container[i] = make(var);
                let mut seen = false;
                container.retain(|e| {
                    let later = seen && named(e);
                    seen |= named(e);
                    !later
                });
            }
            None => container.push(make(var)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    /// `NAME=value` entries as the planner's variables.
    fn vars(v: &[&str]) -> Vec<EnvVar> {
        v.iter()
            .map(|e| {
                let (k, v) = e.split_once('=').unwrap();
                EnvVar::new(k, v)
            })
            .collect()
    }

    /// What [`env_edits`] chose, as entries.
    fn entries(v: Vec<&EnvVar>) -> Vec<String> {
        v.into_iter().map(EnvVar::entry).collect()
    }

    fn merge(env: &mut Vec<String>, granted: &[EnvVar], request: &[&str]) {
        merge_env(env, |s| Some(s.as_str()), EnvVar::entry, granted, request);
    }

    #[test]
    fn a_name_granted_twice_is_set_once_unless_it_is_the_request() {
        let granted = vars(&["A=1", "A=2", "R=1", "R=2"]);
        let mut env = Vec::new();
        merge(&mut env, &granted, &["R"]);
        assert_eq!(env, ["A=1", "R=2"]);
        assert_eq!(
            entries(env_edits([], &granted, &["R"])),
            ["A=1", "R=1", "R=2"]
        );
    }

    #[test]
    fn an_entry_without_a_value_sets_no_name() {
        let mut env = strings(&["KEEP", "X=1"]);
        merge(&mut env, &vars(&["KEEP=ours"]), &[]);
        assert_eq!(env, ["KEEP", "X=1", "KEEP=ours"]);
    }

    #[test]
    fn the_grant_replaces_every_copy_of_the_request_and_other_variables_stay() {
        let mut env = strings(&[
            "DEMO_VISIBLE_DEVICES=all",
            "PATH=/bin",
            "DEMO_DRIVER=mine",
            "DEMO_VISIBLE_DEVICES=1",
        ]);
        let granted = vars(&["DEMO_VISIBLE_DEVICES=0", "DEMO_DRIVER=1", "DEMO_NEW=x"]);
        let request = ["DEMO_VISIBLE_DEVICES"];
        assert_eq!(
            entries(env_edits(
                env.iter().map(String::as_str),
                &granted,
                &request
            )),
            ["DEMO_VISIBLE_DEVICES=0", "DEMO_NEW=x"]
        );
        merge(&mut env, &granted, &request);
        assert_eq!(
            env,
            [
                "DEMO_VISIBLE_DEVICES=0",
                "PATH=/bin",
                "DEMO_DRIVER=mine",
                "DEMO_NEW=x"
            ]
        );
    }

    #[test]
    fn a_name_that_only_starts_like_another_is_another() {
        let mut env = strings(&["DEMO_VISIBLE_DEVICES_X=1"]);
        merge(
            &mut env,
            &vars(&["DEMO_VISIBLE_DEVICES=0"]),
            &["DEMO_VISIBLE_DEVICES"],
        );
        assert_eq!(env, ["DEMO_VISIBLE_DEVICES_X=1", "DEMO_VISIBLE_DEVICES=0"]);
    }
}
