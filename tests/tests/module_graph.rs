//! The shape of the workspace, kept: no crate's top-level modules import each other in a circle,
//! and the crates that only read the host configuration do not link the hook library for it.
//!
//! A module's imports are the `crate::<module>` paths in its code (comments and `#[cfg(test)]`
//! parts left out); a file below `src/<module>/` belongs to `<module>`. Binaries (`src/bin/`)
//! are leaves and are not walked.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's root (this crate lives in `tests/`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn manifest(dir: &Path) -> toml_edit::DocumentMut {
    let path = dir.join("Cargo.toml");
    fs::read_to_string(&path)
        .expect("read a manifest")
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace's member directories, from its manifest.
fn members() -> Vec<String> {
    manifest(&workspace())["workspace"]["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m.as_str().expect("member name").to_string())
        .collect()
}

/// Each member's package name and the names in one of its dependency tables.
fn dependencies(table: &str) -> Graph {
    members()
        .iter()
        .map(|member| {
            let doc = manifest(&workspace().join(member));
            let name = doc["package"]["name"]
                .as_str()
                .expect("package name")
                .to_string();
            let deps = doc
                .get(table)
                .and_then(|t| t.as_table_like())
                .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
                .unwrap_or_default();
            (name, deps)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src` belongs to (`lib` for the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("below src");
    let first = rel
        .components()
        .next()
        .expect("a component")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The modules named as `crate::<name>` in `code`, with `use crate::{a, b::c}` groups.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name = ident(part.trim());
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// A file's code without comments and without its `#[cfg(test)]` part.
fn code_of(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
    before_tests
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

type Graph = BTreeMap<String, BTreeSet<String>>;

fn module_graph(crate_dir: &Path) -> Graph {
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let from = module_of(&src, &file);
        let text = fs::read_to_string(&file).expect("read source");
        let to = graph.entry(from.clone()).or_default();
        to.extend(imports(&code_of(&text)).into_iter().filter(|m| *m != from));
    }
    graph
}

/// Every node `start` reaches in `graph` through one edge or more.
fn reachable(graph: &Graph, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![start.to_string()];
    while let Some(m) = todo.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

/// The circles of `graph`: its strongly connected components of more than one module.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Two modules are in one circle when each reaches the other.
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reachable(graph, m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in graph.keys() {
        let circle: Vec<String> = graph
            .keys()
            .filter(|o| reaches[m].contains(*o) && reaches[*o].contains(m))
            .cloned()
            .collect();
        if circle.len() > 1 && !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let graph: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(circles(&graph), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        imports("use crate::{oci::Spec, policy};\nlet x = crate::child::call;"),
        ["child", "oci", "policy"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert!(imports(&code_of("// see crate::oci\n")).is_empty());
}

#[test]
fn no_crate_has_module_circles() {
    let mut found = Vec::new();
    for member in members() {
        for circle in circles(&module_graph(&workspace().join(&member))) {
            found.push(format!("{member}: {}", circle.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules importing each other in a circle (move what both need into a module of its \
         own): {found:#?}"
    );
}

/// Issue 17: `devinject-ctl`, the installer, the device plugin and the host configuration
/// crate read the host configuration; none links the hook library to do it, directly or
/// through another crate (tests may, through the test harness).
#[test]
fn config_readers_do_not_link_the_hook() {
    let deps = dependencies("dependencies");
    let linked = |start: &str| reachable(&deps, start);
    assert!(
        linked("devinject-nri").contains("devinject-hook"),
        "the walk must see the NRI plugin's use of the hook's pipeline"
    );
    for reader in [
        "devinject-runtime-config",
        "devinject-installer",
        "devinject-device-plugin",
        "devinject-hostconfig",
    ] {
        assert!(
            deps.contains_key(reader),
            "{reader} is not a workspace member"
        );
        assert!(
            !linked(reader).contains("devinject-hook"),
            "{reader} links devinject-hook; read the host configuration through \
             devinject-hostconfig"
        );
    }
}
