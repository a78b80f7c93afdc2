//! The names the docs give the repository, each checked to still name something, so that a
//! rename cannot leave a map behind:
//! - a repository path (`crates/host/discovery/src/watch.rs`, `scripts/bench.sh`, a glob such as
//!   `tests/tests/hostile_*.rs` or `deploy/examples/{kvm,tun}.yaml`) is a file or folder of the
//!   repository, and one followed by `::item` names a file that defines the item;
//! - a link (`[x](dra.md#health)`, relative to the doc) leads to a file of the repository, and its
//!   `#fragment`, in a Markdown file, to one of that file's headings;
//! - a Rust path in backticks (`devinject_devices::FinishArgs`, `crate::inject::nodes`,
//!   `claim.rs::read`) names what the sources define: its crate (a workspace crate's name, or a
//!   file named `<name>.rs`), and each of its segments a module (a file or folder of that name)
//!   or an item (`fn`, `struct`, `enum`, `trait`, `const`, `type`, `mod`, `static`, a macro, an
//!   enum variant, a field), in that crate or in the module named before it.
//!
//! Paths outside the repository (`/dev/kvm`, `target/...`), placeholders (`<profile>`, `...`,
//! `$HOME`) and paths of other crates (`serde_json::Value`: a package of Cargo.lock) are not
//! checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository as the docs name it: its files and folders, its crates and what each source
/// file defines.
pub struct Repo {
    root: PathBuf,
    /// Every file and folder, relative to the root, `/`-separated (folders without a trailing
    /// `/`); build outputs and `.git` left out.
    entries: BTreeSet<String>,
    /// The first folder of every repository path a doc may name (`bins`, `scripts`, `.ci` ...).
    top: BTreeSet<String>,
    /// A workspace crate's name as Rust code spells it (`devinject_devices`) and its short name
    /// (`devices`), each with the crate's folder.
    crates: BTreeMap<String, String>,
    /// The packages of Cargo.lock that are not the workspace's, as Rust code spells them.
    externals: BTreeSet<String>,
    /// Each `.rs` file with the names it defines.
    defines: BTreeMap<String, BTreeSet<String>>,
}

/// One name a doc gives that names nothing: the doc, its line (from 1) and what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct Stale {
    /// The doc, relative to the repository root.
    pub doc: String,
    /// The line of the doc, from 1.
    pub line: usize,
    /// The name as the doc writes it, and why it names nothing.
    pub what: String,
}

/// What [`Repo::check`] found in one doc.
#[derive(Debug, Default)]
pub struct Checked {
    /// How many names the doc gives (paths, links, Rust paths), stale or not.
    pub names: usize,
    /// Those that name nothing.
    pub stale: Vec<Stale>,
}

/// What one name is: None when it is not a name of the repository (`/dev/kvm`, `serde_json::Value`),
/// else whether it names something, or why not.
type Verdict = Option<Result<(), String>>;

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.doc, self.line, self.what)
    }
}

/// Names of what is built or kept out of the tree, never a path a doc can hold to the sources.
const NOT_SOURCES: &[&str] = &["target", ".git"];

/// Paths into other crates that the docs write without the crate's name, beside it in words.
const OTHER_CRATES: &[&str] = &[
    // oci-spec's, in docs/benchmarks.md.
    "runtime::Spec",
];

/// The endings of the files that a doc names by their name alone (`claim.rs`): files of the
/// repository, never of a host (`config.toml`, `daemon.json`).
const SOURCE_SUFFIXES: &[&str] = &[".rs", ".sh", ".py"];

/// The words that define the name after them in Rust.
const DEFINING: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "trait",
    "const",
    "type",
    "mod",
    "static",
    "union",
    "macro_rules",
];

impl Repo {
    /// Reads the repository at `root`: its tree, its crates (every `Cargo.toml` with a
    /// `[package]` name), Cargo.lock's packages and the definitions of every `.rs` file.
    ///
    /// Panics naming the path when a file or folder cannot be read: the caller is a test.
    pub fn scan(root: &Path) -> Repo {
        let mut repo = Repo {
            root: root.to_path_buf(),
            entries: BTreeSet::new(),
            top: BTreeSet::new(),
            crates: BTreeMap::new(),
            externals: BTreeSet::new(),
            defines: BTreeMap::new(),
        };
        repo.walk("");
        repo.top = repo
            .entries
            .iter()
            .filter(|e| !e.contains('/') && root.join(e).is_dir())
            .cloned()
            .collect();
        let manifests: Vec<String> = repo
            .entries
            .iter()
            .filter(|e| e.ends_with("/Cargo.toml"))
            .cloned()
            .collect();
        for manifest in manifests {
            let text = read(&root.join(&manifest));
            if let Some(name) = package_name(&text) {
                let dir = manifest.trim_end_matches("/Cargo.toml").to_string();
                let ident = name.replace('-', "_");
                if let Some(short) = ident.strip_prefix("devinject_") {
                    repo.crates.insert(short.to_string(), dir.clone());
                }
                repo.crates.insert(ident, dir);
            }
        }
        if let Ok(lock) = std::fs::read_to_string(root.join("Cargo.lock")) {
            repo.externals = lock
                .lines()
                .filter_map(|l| l.strip_prefix("name = \""))
                .map(|n| n.trim_end_matches('"').replace('-', "_"))
                .filter(|n| !repo.crates.contains_key(n))
                .collect();
        }
        for std_crate in ["std", "core", "alloc"] {
            repo.externals.insert(std_crate.to_string());
        }
        let sources: Vec<String> = repo
            .entries
            .iter()
            .filter(|e| e.ends_with(".rs"))
            .cloned()
            .collect();
        for file in sources {
            let names = definitions(&read(&root.join(&file)));
            repo.defines.insert(file, names);
        }
        repo
    }

    fn walk(&mut self, dir: &str) {
        let path = self.root.join(dir);
        let entries = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("read the folder {}: {e}", path.display()));
        for entry in entries {
            let entry = entry.unwrap_or_else(|e| panic!("read the folder {}: {e}", path.display()));
            let name = entry.file_name().to_string_lossy().into_owned();
            if NOT_SOURCES.contains(&name.as_str()) {
                continue;
            }
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            self.entries.insert(rel.clone());
            if is_dir {
                self.walk(&rel);
            }
        }
    }

    /// Every name in `text`, the doc at `doc` (relative to the root), that names nothing, and
    /// the count of names read.
    pub fn check(&self, doc: &str, text: &str) -> Checked {
        let doc_dir = doc.rsplit_once('/').map_or("", |(d, _)| d);
        let mut checked = Checked::default();
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            let mut note = |name: &str, verdict: Verdict| {
                let Some(result) = verdict else { return };
                checked.names += 1;
                if let Err(why) = result {
                    checked.stale.push(Stale {
                        doc: doc.to_string(),
                        line: n + 1,
                        what: format!("{name} {why}"),
                    });
                }
            };
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            for target in link_targets(line) {
                note(
                    &format!("the link ({target})"),
                    self.check_link(doc_dir, target, doc),
                );
            }
            let own = without_other_sites(line);
            for token in path_tokens(&own) {
                note(token, self.check_path(token));
            }
            if fenced {
                continue;
            }
            for span in code_spans(line) {
                let verdict = self.check_file_name(span).or_else(|| self.check_item(span));
                note(&format!("`{span}`"), verdict);
            }
        }
        checked
    }

    /// A link's target, relative to the folder `dir` (`doc` itself for a bare `#fragment`).
    fn check_link(&self, dir: &str, target: &str, doc: &str) -> Verdict {
        if target.contains("://") || target.starts_with("mailto:") {
            return None;
        }
        let (file, fragment) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target, None),
        };
        let resolved = if file.is_empty() {
            doc.to_string()
        } else {
            let Some(resolved) = normalize(dir, file) else {
                return Some(Err("leads out of the repository".to_string()));
            };
            resolved
        };
        if !resolved.is_empty() && !self.entries.contains(&resolved) {
            return Some(Err(format!("leads to {resolved}, not in the repository")));
        }
        let Some(fragment) = fragment.filter(|a| !a.is_empty() && resolved.ends_with(".md")) else {
            return Some(Ok(()));
        };
        let text = read(&self.root.join(&resolved));
        if heading_anchors(&text).contains(fragment) {
            Some(Ok(()))
        } else {
            Some(Err(format!(
                "names #{fragment}, not a heading of {resolved}"
            )))
        }
    }

    /// A word that starts with one of the repository's folders.
    fn check_path(&self, token: &str) -> Verdict {
        let first = token.split('/').next().unwrap_or_default();
        if !self.top.contains(first) {
            return None;
        }
        let (path, items) = match token.split_once("::") {
            Some((p, i)) => (p, i.split("::").collect()),
            None => (token, Vec::new()),
        };
        let (path, fragment) = match path.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (path, None),
        };
        let path = path.trim_end_matches('/');
        let matches: Vec<&str> = expand_braces(path)
            .iter()
            .flat_map(|p| self.matching(p))
            .collect();
        if matches.is_empty() {
            return Some(Err("is not in the repository".to_string()));
        }
        if let Some(fragment) = fragment {
            return self.check_link("", &format!("{path}#{fragment}"), path);
        }
        if items.is_empty() {
            return Some(Ok(()));
        }
        Some(self.resolve(&matches, &items, path))
    }

    /// The entries a path matches, `*` standing for any part of one name.
    fn matching<'a>(&'a self, pattern: &str) -> Vec<&'a str> {
        if !pattern.contains('*') {
            return self
                .entries
                .get(pattern)
                .map(String::as_str)
                .into_iter()
                .collect();
        }
        let depth = pattern.matches('/').count();
        self.entries
            .iter()
            .filter(|e| e.matches('/').count() == depth && glob(pattern, e))
            .map(String::as_str)
            .collect()
    }

    /// A file named by the end of its path (`claim.rs`, `inject/nodes.rs`, `mod.rs::item`): some
    /// file's path ends so, and defines the items after it.
    fn check_file_name(&self, span: &str) -> Verdict {
        let (file, items) = match span.split_once("::") {
            Some((f, i)) => (f, i.split("::").collect()),
            None => (span, Vec::new()),
        };
        let named = SOURCE_SUFFIXES.iter().any(|s| file.ends_with(s))
            && file
                .split('/')
                .all(|p| !p.is_empty() && p.chars().all(is_path_char))
            && items.iter().all(|s| is_ident(s));
        let first = file.split('/').next().unwrap_or_default();
        if !named || first == "." || self.top.contains(first) {
            // Not a file name, or a repository path that check_path reads.
            return None;
        }
        let files: Vec<&str> = self
            .entries
            .iter()
            .filter(|e| *e == file || e.ends_with(&format!("/{file}")))
            .map(String::as_str)
            .collect();
        if files.is_empty() {
            return Some(Err("names no file of the repository".to_string()));
        }
        Some(self.resolve(&files, &items, file))
    }

    /// A Rust path: `crate_name::a::b`, `crate::a`, `module::item`, `Type::method`.
    fn check_item(&self, span: &str) -> Verdict {
        let segments: Vec<&str> = span.split("::").collect();
        let (first, rest) = segments.split_first()?;
        if rest.is_empty() || !is_ident(first) || !rest.iter().all(|s| is_ident(s)) {
            return None;
        }
        if self.externals.contains(*first) || OTHER_CRATES.contains(&span) {
            return None;
        }
        let all: Vec<&str> = self.defines.keys().map(String::as_str).collect();
        if let Some(dir) = self.crates.get(*first) {
            let in_crate: Vec<&str> = all
                .iter()
                .copied()
                .filter(|f| f.starts_with(&format!("{dir}/")))
                .collect();
            let as_crate = self.resolve(&in_crate, rest, dir);
            // A crate's short name (`devices::discover`) may also be a module's.
            return Some(if as_crate.is_ok() || first.starts_with("devinject_") {
                as_crate
            } else {
                self.resolve(&all, &segments, "the workspace").or(as_crate)
            });
        }
        if first.starts_with("devinject_") {
            return Some(Err(format!("names {first}, no crate of the workspace")));
        }
        Some(match *first {
            "crate" | "self" | "super" => self.resolve(&all, rest, "the workspace"),
            _ => self.resolve(&all, &segments, "the workspace"),
        })
    }

    /// Follows `segments` from the source files `scope`: each must be defined in the files of
    /// the one before it (a module's files and the files that declare it inline; for a type,
    /// every file of `scope`, where its `impl` blocks may be).
    fn resolve(&self, scope: &[&str], segments: &[&str], place: &str) -> Result<(), String> {
        let mut current: Vec<&str> = scope.to_vec();
        let mut previous: Option<&str> = None;
        for segment in segments {
            let defining: Vec<&str> = current
                .iter()
                .copied()
                .filter(|f| self.defines[*f].contains(*segment))
                .collect();
            let module: Vec<&str> = current
                .iter()
                .copied()
                .filter(|f| module_of(f).contains(segment))
                .collect();
            if defining.is_empty() && module.is_empty() {
                let place = previous.unwrap_or(place);
                return Err(format!("names {segment}, which {place} does not define"));
            }
            current = if segment.starts_with(|c: char| c.is_ascii_uppercase()) {
                scope.to_vec()
            } else {
                defining.into_iter().chain(module).collect()
            };
            previous = Some(segment);
        }
        Ok(())
    }
}

/// The modules a source file is part of: its own name (`nodes` for `inject/nodes.rs` and
/// `inject/nodes/mod.rs`) and its folders' names.
fn module_of(file: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = file.split('/').collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs");
    }
    parts
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(value) = line.strip_prefix("name") {
                let value = value.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_string());
            }
        }
    }
    None
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The names a Rust source defines: the name after each defining word, every enum variant
/// (a line that is a capitalized name, then `,`, `(`, `{`, `=` or nothing) and every field (a
/// line `[pub] name: ...`).
fn definitions(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in source.lines() {
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            if DEFINING.contains(&pair[0]) && is_ident(pair[1]) {
                names.insert(pair[1].to_string());
            }
        }
        for pair in words.windows(3) {
            // `static mut NAME`, `macro_rules! name` split as words.
            if (pair[0] == "static" && pair[1] == "mut") || pair[0] == "macro_rules" {
                names.insert(pair[2].to_string());
            }
        }
        let trimmed = line.trim_start();
        let unpublished = trimmed
            .strip_prefix("pub(crate) ")
            .or_else(|| trimmed.strip_prefix("pub(super) "))
            .or_else(|| trimmed.strip_prefix("pub "))
            .unwrap_or(trimmed);
        let head: String = unpublished
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !is_ident(&head) {
            continue;
        }
        let after = unpublished[head.len()..].trim_start();
        let variant = head.starts_with(|c: char| c.is_ascii_uppercase())
            && (after.is_empty() || after.starts_with([',', '(', '{', '=']));
        let field = after.starts_with(':') && !after.starts_with("::");
        if variant || field {
            names.insert(head);
        }
    }
    names
}

/// The targets of the Markdown links on a line: `[text](target)` and `[ref]: target`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        if !target.is_empty() {
            targets.push(target);
        }
        rest = &after[end..];
    }
    // A reference definition: `[label]: target`, or `[label]: target "title"`.
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some((label, rest)) = trimmed.split_once("]: ") {
            let mut words = rest.split_whitespace();
            let target = words.next().unwrap_or_default();
            let titled = words.next().is_none_or(|w| w.starts_with(['"', '\'', '(']));
            if !label.contains(']') && !target.is_empty() && titled {
                targets.push(target);
            }
        }
    }
    targets
}

/// `line` with the text of each link to another site blanked: a path there
/// (`[tests/input/x.csv](https://github.com/...)`) is that site's, not the repository's.
fn without_other_sites(line: &str) -> String {
    let mut out = line.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("](").map(|i| i + from) {
        let target_end = out[at..].find(')').map_or(out.len(), |i| at + i);
        let external = out[at + 2..target_end].contains("://");
        if let Some(open) = out[..at].rfind('[') {
            if external {
                let blank = " ".repeat(out[open..at].len());
                out.replace_range(open..at, &blank);
            }
        }
        from = at + 2;
    }
    out
}

/// The words of a line that may be repository paths: split at spaces, backticks, brackets,
/// quotes, `=`, `|` and commas outside `{...}`, less the punctuation that ends a sentence; those
/// with a placeholder (`<`, `...`, `$`) left out.
fn path_tokens(line: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let mut start = 0;
    let mut braces = 0usize;
    for (i, c) in line.char_indices() {
        match c {
            '{' => braces += 1,
            '}' => braces = braces.saturating_sub(1),
            _ => {}
        }
        let splits = c.is_whitespace()
            || matches!(c, '`' | '(' | ')' | '[' | ']' | '"' | '\'' | '=' | '|')
            || (c == ',' && braces == 0);
        if splits {
            tokens.push(&line[start..i]);
            start = i + c.len_utf8();
        }
    }
    tokens.push(&line[start..]);
    tokens
        .into_iter()
        .map(|t| t.trim_end_matches(['.', ',', ':', ';', '!', '?']))
        .map(|t| t.strip_prefix("./").unwrap_or(t))
        .filter(|t| t.contains('/') && !t.contains(['<', '>', '$']) && !t.contains(".."))
        .collect()
}

/// The code spans of a line, between single backticks.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// `dir/path` with `.` and `..` resolved; None when it leaves the repository.
fn normalize(dir: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// `a/{b,c}/d` as `a/b/d` and `a/c/d` (one pair of braces, as the docs write them).
fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_string()];
    };
    if close < open {
        return vec![path.to_string()];
    }
    path[open + 1..close]
        .split(',')
        .map(|alt| format!("{}{alt}{}", &path[..open], &path[close + 1..]))
        .collect()
}

/// True when `name` matches `pattern`, `*` standing for any run of characters but `/`.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i) && !rest[..i].contains('/'))
                .any(|i| glob(tail, &rest[i..]))
        }
    }
}

/// The anchors of a Markdown file's headings as GitHub makes them: the text lowercased, all but
/// letters, digits, `-`, `_` and spaces dropped, spaces made `-`; a repeated one numbered.
pub fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let text = heading.trim_start_matches('#');
        if !text.starts_with(' ') {
            continue;
        }
        let slug: String = link_texts(text.trim())
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// A heading's text with each link `[text](target)` as its text.
fn link_texts(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        let Some(end) = rest[at..].find(')') else {
            break;
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository in a temporary folder: `files` as (path, contents).
    fn repo(files: &[(&str, &str)]) -> (PathBuf, Repo) {
        let root = std::env::temp_dir().join(format!(
            "devinject-doc-names-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let repo = Repo::scan(&root);
        (root, repo)
    }

    fn small() -> (PathBuf, Repo) {
        repo(&[
            ("Cargo.lock", "[[package]]\nname = \"serde_json\"\n"),
            ("README.md", "# devinject\n"),
            (
                "crates/core/devices/Cargo.toml",
                "[package]\nname = \"devinject-devices\"\n",
            ),
            (
                "crates/core/devices/src/lib.rs",
                "pub mod watch;\npub struct FinishArgs {\n    pub nodes: Vec<u8>,\n}\n",
            ),
            (
                "crates/core/devices/src/watch.rs",
                "pub enum Event {\n    Added(u8),\n    Gone,\n}\npub fn watch() {}\n",
            ),
            (
                "bins/oci/Cargo.toml",
                "[package]\nname = \"devinject-oci\"\n",
            ),
            (
                "bins/oci/src/inject/nodes.rs",
                "pub(crate) fn regroup() {}\n",
            ),
            ("scripts/bench.sh", ""),
            ("deploy/examples/kvm.yaml", ""),
            ("deploy/examples/tun.yaml", ""),
            (
                "docs/dra.md",
                "# DRA\n\n## Health of a `device`\n\n## Health of a `device`\n",
            ),
        ])
    }

    fn stale(doc: &str, text: &str) -> Vec<String> {
        let (root, repo) = small();
        let found = repo
            .check(doc, text)
            .stale
            .iter()
            .map(|s| s.to_string())
            .collect();
        std::fs::remove_dir_all(root).unwrap();
        found
    }

    #[test]
    fn names_that_exist_pass() {
        let doc = "See `crates/core/devices/src/watch.rs` and scripts/bench.sh.\n\
                   `deploy/examples/{kvm,tun}.yaml`, `deploy/examples/*.yaml`, `bins/oci/`\n\
                   [dra](docs/dra.md#health-of-a-device-1), [self](#x), [web](https://x.io/a)\n\
                   `devinject_devices::FinishArgs`, `devices::watch::Event::Gone`, `crate::inject::nodes`\n\
                   `bins/oci/src/inject/nodes.rs::regroup`, `nodes.rs::regroup`, `serde_json::Value`\n\
                   `FinishArgs::nodes`, `/dev/kvm`, `target/debug/x`, `crates/<layer>/`, `0::1`\n\
                   [`scripts/x.sh`](https://example.org/scripts/x.sh) [+1, +2]: not a link\n";
        assert_eq!(
            stale("README.md", doc),
            vec!["README.md:3: the link (#x) names #x, not a heading of README.md"]
        );
    }

    #[test]
    fn a_path_that_is_gone_is_named_with_its_line() {
        let doc = "# t\n\nSee `crates/core/devices/src/watcher.rs`, `scripts/bench.sh` and\n\
                   scripts/benches.sh: `deploy/examples/{kvm,fuse}.yaml`, `bins/*/src/main.rs`.\n";
        assert_eq!(
            stale("docs/x.md", doc),
            vec![
                "docs/x.md:3: crates/core/devices/src/watcher.rs is not in the repository",
                "docs/x.md:4: scripts/benches.sh is not in the repository",
                "docs/x.md:4: bins/*/src/main.rs is not in the repository",
            ]
        );
    }

    #[test]
    fn a_link_that_is_gone_is_named() {
        let doc = "[a](dra.md) [b](../docs/dra.md#health) [c](../scripts/bench.sh) [d](nri.md#x)\n";
        assert_eq!(
            stale("docs/x.md", doc),
            vec![
                "docs/x.md:1: the link (../docs/dra.md#health) names #health, not a heading of docs/dra.md",
                "docs/x.md:1: the link (nri.md#x) leads to docs/nri.md, not in the repository",
            ]
        );
    }

    #[test]
    fn an_item_that_is_gone_is_named() {
        let doc = "`devinject_devices::FinishArg`, `devinject_device::FinishArgs`\n\
                   `watch::regroup`, `nodes.rs::watch`, `policy::helper::run`\n\
                   `bins/oci/src/inject/nodes.rs::watch`\n";
        assert_eq!(
            stale("README.md", doc),
            vec![
                "README.md:1: `devinject_devices::FinishArg` names FinishArg, which crates/core/devices does not define",
                "README.md:1: `devinject_device::FinishArgs` names devinject_device, no crate of the workspace",
                "README.md:2: `watch::regroup` names regroup, which watch does not define",
                "README.md:2: `nodes.rs::watch` names watch, which nodes.rs does not define",
                "README.md:2: `policy::helper::run` names policy, which the workspace does not define",
                "README.md:3: bins/oci/src/inject/nodes.rs::watch names watch, which bins/oci/src/inject/nodes.rs does not define",
            ]
        );
    }

    #[test]
    fn code_blocks_are_read_for_paths_only() {
        let doc = "```sh\nscripts/gone.sh `a::b`\n```\n";
        assert_eq!(
            stale("README.md", doc),
            vec!["README.md:2: scripts/gone.sh is not in the repository"]
        );
    }

    #[test]
    fn anchors_are_made_as_github_makes_them() {
        let anchors = heading_anchors(
            "# The `devinject-ctl` tool (v1.2)\n```\n# not a heading\n```\n## A [link](x.md) here\n## A link here\n",
        );
        let expected = ["the-devinject-ctl-tool-v12", "a-link-here", "a-link-here-1"];
        assert_eq!(anchors, expected.iter().map(|s| s.to_string()).collect());
    }

    /// Every name README.md, ARCHITECTURE.md and docs/*.md give the repository names something.
    #[test]
    fn every_name_in_the_docs_names_something() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let repo = Repo::scan(&root);
        let mut docs = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
        let mut in_docs: Vec<String> = std::fs::read_dir(root.join("docs"))
            .expect("read docs/")
            .flatten()
            .map(|e| format!("docs/{}", e.file_name().to_string_lossy()))
            .filter(|d| d.ends_with(".md"))
            .collect();
        in_docs.sort();
        docs.extend(in_docs);
        let (mut names, mut stale) = (0, Vec::new());
        for doc in &docs {
            let checked = repo.check(doc, &read(&root.join(doc)));
            names += checked.names;
            stale.extend(checked.stale.iter().map(|s| s.to_string()));
        }
        // The docs name well over a thousand paths, links and items: far fewer means the reader
        // no longer finds them, and the check would pass on nothing.
        assert!(names > 1000, "only {names} names read in {docs:?}");
        assert!(
            stale.is_empty(),
            "{} names in the docs name nothing (rename them with what they named):\n{}",
            stale.len(),
            stale.join("\n")
        );
    }
}
