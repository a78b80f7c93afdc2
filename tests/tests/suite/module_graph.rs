//! The shape of the workspace, kept: every crate links only its layer or below, no crate's
//! top-level modules import each other in a circle, every program has one entry layout,
//! and the crates that only read the host configuration do not link the hook library for it.
//!
//! A module's imports are the `crate::<module>` paths in its code, nested `use` groups
//! included; comments, `#[cfg(test)]` items wherever they stand and the files of test-only
//! modules are left out. A file below `src/<module>/` belongs to `<module>`. Binaries
//! (`src/bin/`) are leaves and are not walked.

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

/// The package name in a member's manifest.
fn package_name(doc: &toml_edit::DocumentMut) -> String {
    doc["package"]["name"]
        .as_str()
        .expect("package name")
        .to_string()
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
            let name = package_name(&doc);
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

/// The length of the item at the start of `s`: up to and with its `;` (or the `,` or `}` that
/// ends a field, a variant or the enclosing block) when that comes before any `{`, else up to
/// and with the brace that closes its first `{`.
fn item_len(s: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            ';' | ',' if depth == 0 => return i + 1,
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// The items of a brace group whose `{` was just passed (`a, b::{c, d}, e}`): the text of each
/// item at its top level, up to the group's own `}`.
fn group_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[from..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[from..]);
    items
}

/// The modules named as `crate::<name>` in `code`, with `use crate::{a, b::{c, d}}` groups.
fn imports(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(group) => group_items(group).into_iter().map(ident).collect(),
            None => vec![ident(rest)],
        };
        found.extend(names.into_iter().filter(|n| !n.is_empty()));
    }
    found
}

/// A file's code without comment lines and without its `#[cfg(test)]` items, wherever they
/// stand; and the names of the modules it declares `#[cfg(test)] mod name;` (test code in files
/// of their own).
fn without_tests(text: &str) -> (String, Vec<String>) {
    let code = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut kept = String::new();
    let mut test_modules = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let len = item_len(item);
        let head = item[..len].trim();
        let declared = head
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .strip_prefix("mod ")
            .and_then(|m| m.strip_suffix(';'));
        test_modules.extend(declared.map(|m| m.trim().to_string()));
        rest = &item[len..];
    }
    kept.push_str(rest);
    (kept, test_modules)
}

type Graph = BTreeMap<String, BTreeSet<String>>;

fn module_graph(crate_dir: &Path) -> Graph {
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut code = BTreeMap::new();
    // Where the files of `#[cfg(test)] mod name;` modules are: `name.rs` and `name/` beside a
    // `lib.rs` or `mod.rs`, under `foo/` for a `foo.rs`.
    let mut test_only: Vec<PathBuf> = Vec::new();
    for file in files {
        let (kept, test_modules) = without_tests(&fs::read_to_string(&file).expect("read source"));
        let dir = file.parent().expect("a directory");
        let stem = file.file_stem().expect("a file name");
        let base = if ["lib", "mod", "main"].iter().any(|n| stem == *n) {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        for m in test_modules {
            test_only.push(base.join(format!("{m}.rs")));
            test_only.push(base.join(m));
        }
        code.insert(file, kept);
    }
    let mut graph = Graph::new();
    for (file, kept) in code {
        if test_only.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let from = module_of(&src, &file);
        let to = graph.entry(from.clone()).or_default();
        to.extend(imports(&kept).into_iter().filter(|m| *m != from));
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
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
    assert_eq!(
        imports("use crate::{oci::Spec, policy};\nlet x = crate::child::call;"),
        set(&["child", "oci", "policy"])
    );
    assert_eq!(
        imports("use crate::{\n    inject::{self, Host},\n    policy,\n};"),
        set(&["inject", "policy"])
    );
    let (kept, test_modules) = without_tests(
        "// see crate::oci\n#[cfg(test)]\nfn helper() { if x { crate::a::f() } }\n\
         fn real() { crate::b::g() }\n#[cfg(test)]\nmod tests;\n\
         struct S {\n    #[cfg(test)]\n    seen: crate::c::C,\n    d: crate::d::D,\n}\n",
    );
    assert_eq!(imports(&kept), set(&["b", "d"]));
    assert_eq!(test_modules, vec!["tests"]);
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

/// `devinject-ctl`, the installer, the device plugin and the host configuration crate read the host
/// configuration; none links the hook library to do it, directly or through another crate (tests
/// may, through the test harness). The NRI plugin admits through `devinject-admission` and runs
/// prepare steps through `devinject-contained`, not through the hook, and the admission core links
/// no engine path.
#[test]
fn config_readers_do_not_link_the_hook() {
    let deps = dependencies("dependencies");
    let linked = |start: &str| reachable(&deps, start);
    assert!(
        linked("devinject-oci").contains("devinject-admission")
            && linked("devinject-nri").contains("devinject-admission")
            && linked("devinject-nri").contains("devinject-contained"),
        "the walk must see the hook's and the NRI plugin's use of the admission core"
    );
    for reader in [
        "devinject-ctl",
        "devinject-cdi",
        "devinject-installer",
        "devinject-device-plugin",
        "devinject-hostconfig",
        "devinject-nri",
        "devinject-admission",
        "devinject-contained",
        "devinject-dra",
    ] {
        assert!(
            deps.contains_key(reader),
            "{reader} is not a workspace member"
        );
        assert!(
            !linked(reader).contains("devinject-oci"),
            "{reader} links devinject-oci (the hook and the shim); read the host configuration through \
             devinject-hostconfig, admit through devinject-admission, run host programs through \
             devinject-contained"
        );
    }
}

/// The DRA driver shares the kubelet-facing pieces through leaf crates (the `:authority` rewriter,
/// the profiles, the CDI renderer, the host-file layer), never through another binary's crate
/// (`devinject-ctl` is `devinject-ctl`'s).
#[test]
fn the_dra_driver_links_no_other_engine_path() {
    let deps = dependencies("dependencies");
    let linked = reachable(&deps, "devinject-dra");
    assert!(
        linked.contains("devinject-kubelet")
            && linked.contains("devinject-cdi")
            && linked.contains("devinject-hostfs"),
        "the walk must see the DRA driver's leaf crates: {linked:?}"
    );
    for other in [
        "devinject-oci",
        "devinject-device-plugin",
        "devinject-nri",
        "devinject-ctl",
    ] {
        assert!(
            !linked.contains(other),
            "devinject-dra links {other}; move what it needs into a leaf crate"
        );
    }
}

/// A member's folder, package name and workspace dependencies (without the `devinject-` prefix),
/// normal and dev, as ARCHITECTURE.md's crate graph prints them.
fn graph_line(member: &str, width: usize) -> String {
    let doc = manifest(&workspace().join(member));
    let name = package_name(&doc);
    let ours = |table: &str| -> Vec<String> {
        let mut names: Vec<String> = doc
            .get(table)
            .and_then(|t| t.as_table_like())
            .map(|t| {
                t.iter()
                    .filter_map(|(k, _)| k.strip_prefix("devinject-").map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    let (deps, dev) = (ours("dependencies"), ours("dev-dependencies"));
    let mut line = format!("{:<width$}  {name}", format!("{member}/"));
    if !deps.is_empty() {
        line += &format!(" -> {}", deps.join(", "));
    }
    if !dev.is_empty() {
        line += &format!("  [{}]", dev.join(", "));
    }
    line
}

/// ARCHITECTURE.md's crate graph is the workspace's: every member in the order of the root
/// manifest (core, host, shared, the binaries, the tests), with its folder and the workspace
/// crates it links, so the map cannot go stale when a crate moves or gains a dependency.
#[test]
fn architecture_shows_the_crate_graph_of_the_manifests() {
    let members = members();
    let width = members.iter().map(|m| m.len() + 1).max().unwrap_or(0);
    let expected: Vec<String> = members.iter().map(|m| graph_line(m, width)).collect();
    let text = fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let block = text
        .split("## The crate graph")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("ARCHITECTURE.md has a ```-block under `## The crate graph`");
    let shown: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        shown,
        expected,
        "ARCHITECTURE.md's crate graph differs from the manifests; the block should read:\n```\n{}\n```",
        expected.join("\n")
    );
}

/// The layers hold: no library under `crates/` links a program's crate under `bins/`, directly or
/// through another crate, so what two programs share always lives below both of them.
#[test]
fn libraries_link_no_program() {
    let deps = dependencies("dependencies");
    let package = |member: &str| package_name(&manifest(&workspace().join(member)));
    let members = members();
    let programs: BTreeSet<String> = members
        .iter()
        .filter(|m| m.starts_with("bins/"))
        .map(|m| package(m))
        .collect();
    let libraries: Vec<String> = members
        .iter()
        .filter(|m| m.starts_with("crates/"))
        .map(|m| package(m))
        .collect();
    assert!(
        !programs.is_empty() && !libraries.is_empty(),
        "the workspace has no bins/ or no crates/ member: {members:?}"
    );
    for library in libraries {
        let linked: Vec<_> = reachable(&deps, &library)
            .intersection(&programs)
            .cloned()
            .collect();
        assert!(
            linked.is_empty(),
            "{library} (a library under crates/) links the program crate(s) {linked:?}; move what \
             they share into a crate under crates/"
        );
    }
}

/// The layers, bottom first, by the folder a member lives in: a crate links only crates of its
/// own layer or below, so what a folder says a crate is, its dependencies hold.
const LAYERS: [(&str, &str); 5] = [
    ("crates/core/", "core: pure decisions, no host I/O"),
    ("crates/host/", "host: touches the host through descriptors"),
    (
        "crates/shared/",
        "shared: talks to the kubelet, the API server, Prometheus",
    ),
    ("bins/", "a program"),
    ("tests/", "tests and benchmarks"),
];

/// Links that still go up a layer, each with why and what ends it: none now. A link that must
/// go up for a while is listed here with its reason, and the test fails once it is gone.
const UPWARD_LINKS_LEFT: [(&str, &str); 0] = [];

/// The layer index of a member folder (its position in [`LAYERS`]).
fn layer_of(member: &str) -> Option<usize> {
    let folder = format!("{}/", member.trim_end_matches('/'));
    LAYERS
        .iter()
        .position(|(prefix, _)| folder.starts_with(prefix))
}

/// Every normal dependency of a member on a member of a higher layer: `(from, to)` package
/// names, given each member's folder, package and dependency names.
fn upward_links(members: &[(String, String, BTreeSet<String>)]) -> Vec<(String, String)> {
    let layer: BTreeMap<&str, usize> = members
        .iter()
        .filter_map(|(folder, name, _)| layer_of(folder).map(|l| (name.as_str(), l)))
        .collect();
    let mut found = Vec::new();
    for (folder, name, deps) in members {
        let Some(own) = layer_of(folder) else {
            continue;
        };
        for dep in deps {
            if layer.get(dep.as_str()).is_some_and(|&l| l > own) {
                found.push((name.clone(), dep.clone()));
            }
        }
    }
    found
}

/// The checker itself finds an upward link planted in a made-up workspace, and passes one
/// that only links down.
#[test]
fn the_layer_check_finds_a_planted_upward_link() {
    let member = |folder: &str, name: &str, deps: &[&str]| {
        (
            folder.to_string(),
            name.to_string(),
            deps.iter().map(|d| d.to_string()).collect::<BTreeSet<_>>(),
        )
    };
    let down = [
        member("crates/core/a", "a", &[]),
        member("crates/host/b", "b", &["a"]),
        member("bins/c", "c", &["a", "b"]),
    ];
    assert!(upward_links(&down).is_empty());
    let planted = [
        member("crates/core/a", "a", &["c"]),
        member("crates/host/b", "b", &["a"]),
        member("bins/c", "c", &["b"]),
    ];
    assert_eq!(
        upward_links(&planted),
        vec![("a".to_string(), "c".to_string())]
    );
}

/// Every member lives in a layer's folder, and links only its own layer or below (but the
/// links [`UPWARD_LINKS_LEFT`] names, each of which must still exist so the list cannot go
/// stale).
#[test]
fn every_crate_links_only_its_layer_or_below() {
    let members: Vec<(String, String, BTreeSet<String>)> = members()
        .into_iter()
        .map(|folder| {
            let doc = manifest(&workspace().join(&folder));
            let deps = doc
                .get("dependencies")
                .and_then(|t| t.as_table_like())
                .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
                .unwrap_or_default();
            (folder, package_name(&doc), deps)
        })
        .collect();
    let outside: Vec<&String> = members
        .iter()
        .filter(|(folder, _, _)| layer_of(folder).is_none())
        .map(|(folder, _, _)| folder)
        .collect();
    assert!(
        outside.is_empty(),
        "members outside every layer's folder {:?}: {outside:?}",
        LAYERS.map(|(prefix, _)| prefix)
    );
    let found = upward_links(&members);
    let layer_name = |package: &str| {
        members
            .iter()
            .find(|(_, name, _)| name == package)
            .and_then(|(folder, _, _)| layer_of(folder))
            .map_or("?", |l| LAYERS[l].1)
    };
    let new: Vec<String> = found
        .iter()
        .filter(|(from, to)| !UPWARD_LINKS_LEFT.contains(&(from.as_str(), to.as_str())))
        .map(|(from, to)| {
            format!(
                "{from} ({}) links {to} ({})",
                layer_name(from),
                layer_name(to)
            )
        })
        .collect();
    assert!(
        new.is_empty(),
        "crates linking a layer above their own; move the shared part down, or the crate up to \
         the layer it really is in: {new:#?}"
    );
    for (from, to) in UPWARD_LINKS_LEFT {
        assert!(
            found.contains(&(from.to_string(), to.to_string())),
            "{from} no longer links {to}: take the pair out of UPWARD_LINKS_LEFT"
        );
    }
}

/// What is wrong with the layout of the program in `folder` (under `bins/`): its package must be
/// `devinject-<folder's name>`, and each of its binaries declared with its entry at
/// `src/bin/<binary>/main.rs`, its private modules beside it; no `src/main.rs`, nothing in
/// `src/bin/` but the declared binaries' folders. Given the package name, the declared
/// `(name, path)` of each `[[bin]]`, the names in `src/` and those in `src/bin/`.
fn layout_faults(
    folder: &str,
    package: &str,
    bins: &[(String, Option<String>)],
    src_names: &[String],
    bin_names: &[String],
) -> Vec<String> {
    let mut faults = Vec::new();
    let short = folder
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    if package != format!("devinject-{short}") {
        faults.push(format!(
            "{folder}: the package is {package}, not devinject-{short}"
        ));
    }
    if bins.is_empty() {
        faults.push(format!("{folder}: no [[bin]] in its manifest"));
    }
    for (name, path) in bins {
        let entry = format!("src/bin/{name}/main.rs");
        if path.as_deref() != Some(entry.as_str()) {
            faults.push(format!(
                "{folder}: the binary {name} has its entry at {}, not {entry}",
                path.as_deref().unwrap_or("cargo's default")
            ));
        }
    }
    if src_names.iter().any(|f| f == "main.rs") {
        faults.push(format!(
            "{folder}: src/main.rs; the entry is src/bin/<binary>/main.rs"
        ));
    }
    for name in bin_names {
        if !bins.iter().any(|(b, _)| b == name) {
            faults.push(format!(
                "{folder}: src/bin/{name} is no declared binary's folder"
            ));
        }
    }
    faults
}

/// The layout check finds each planted fault and passes a program laid out as the rule says.
#[test]
fn the_layout_check_finds_planted_faults() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let bin = |name: &str, path: Option<&str>| (name.to_string(), path.map(str::to_string));
    let good = [bin("devinject-x", Some("src/bin/devinject-x/main.rs"))];
    assert_eq!(
        layout_faults(
            "bins/x",
            "devinject-x",
            &good,
            &s(&["lib.rs", "bin"]),
            &s(&["devinject-x"])
        ),
        Vec::<String>::new()
    );
    let faults = layout_faults(
        "bins/x",
        "devinject-y",
        &[bin("devinject-x", Some("src/bin/devinject-x.rs"))],
        &s(&["main.rs"]),
        &s(&["devinject-x", "stray.rs"]),
    );
    assert_eq!(faults.len(), 4, "{faults:#?}");
    assert!(!layout_faults("bins/x", "devinject-x", &[], &s(&[]), &s(&[])).is_empty());
}

/// Every program under `bins/` has one layout: folder, package and binary named alike, each
/// binary's entry at `src/bin/<binary>/main.rs`, so a newcomer finds any program's `main` the
/// same way.
#[test]
fn every_program_has_one_entry_layout() {
    let names = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let programs: Vec<String> = members()
        .into_iter()
        .filter(|m| m.starts_with("bins/"))
        .collect();
    assert!(programs.len() >= 8, "bins/ members: {programs:?}");
    let mut faults = Vec::new();
    for folder in &programs {
        let dir = workspace().join(folder);
        let doc = manifest(&dir);
        let bins: Vec<(String, Option<String>)> = doc
            .get("bin")
            .and_then(|b| b.as_array_of_tables())
            .map(|tables| {
                tables
                    .iter()
                    .map(|t| {
                        (
                            t.get("name")
                                .and_then(|n| n.as_str())
                                .unwrap_or("")
                                .to_string(),
                            t.get("path").and_then(|p| p.as_str()).map(str::to_string),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        faults.extend(layout_faults(
            folder,
            &package_name(&doc),
            &bins,
            &names(&dir.join("src")),
            &names(&dir.join("src/bin")),
        ));
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}
