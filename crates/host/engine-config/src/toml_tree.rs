//! Navigating, building and normalising `toml_edit` trees of engine configuration files.

use std::path::Path;

use toml_edit::visit_mut::{self, VisitMut};
use toml_edit::{Array, Item, Table, Value};

use crate::error::{Result, RuntimeConfigError};

/// The item at `keys` below `table`, if every step is a table (or inline table).
pub fn get<'a>(table: &'a Table, keys: &[&str]) -> Option<&'a Item> {
    let (first, rest) = keys.split_first()?;
    let mut item = table.get(first)?;
    for key in rest {
        item = item.as_table_like()?.get(key)?;
    }
    Some(item)
}

/// The table at `keys` below `table`, creating missing tables as implicit ones (so that no empty
/// `[a]` headers appear). Fails, naming the file and key, when a step exists but is not a table.
pub fn table_mut<'a>(
    table: &'a mut Table,
    keys: &[&str],
    file: &Path,
    text: &str,
) -> Result<&'a mut Table> {
    let mut cur = table;
    for (i, key) in keys.iter().enumerate() {
        let item = cur.entry(key).or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        });
        if let Item::Value(Value::InlineTable(_)) = item {
            // An inline table cannot hold `[sub.tables]`; turn it into a normal one.
            let taken = std::mem::take(item);
            *item = taken.into_table().map(Item::Table).unwrap_or(Item::None);
        }
        let line = crate::load::toml_line(text, &keys[..=i]);
        cur = item
            .as_table_mut()
            .ok_or_else(|| RuntimeConfigError::Unsupported {
                path: file.to_path_buf(),
                line,
                problem: format!("`{}` is not a table", keys[..=i].join(".")),
                fix: "make it a table, as the engine's documentation shows".to_string(),
            })?;
    }
    Ok(cur)
}

/// A string array as `Vec<String>`; `None` when `item` is not an array of strings.
pub fn string_array(item: &Item) -> Option<Vec<String>> {
    item.as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// A TOML array of strings.
pub fn array_of(values: &[String]) -> Array {
    values.iter().map(String::as_str).collect()
}

/// Appends `value` to `array` in the array's own layout: on its own line, indented like the last
/// element, when the array is written one element per line (a comment after the last element
/// stays with that element).
pub fn push_like_last(array: &mut Array, value: &str) {
    let last_prefix = array
        .iter()
        .last()
        .and_then(|v| v.decor().prefix())
        .and_then(|p| p.as_str())
        .map(str::to_string);
    match last_prefix {
        Some(prefix) if prefix.contains('\n') => {
            let trailing = array.trailing().as_str().unwrap_or("").to_string();
            let (comment, rest) = match trailing.rfind('\n') {
                Some(i) => trailing.split_at(i),
                None => (trailing.as_str(), ""),
            };
            let mut v = Value::from(value);
            v.decor_mut().set_prefix(format!("{comment}{prefix}"));
            v.decor_mut().set_suffix("");
            array.push_formatted(v);
            array.set_trailing(rest.to_string());
        }
        _ => array.push(value),
    }
}

/// Removes the string `value` from `array`, moving a comment written after it back to where it
/// was before [`push_like_last`]. Returns whether it was there.
pub fn remove_keeping_comments(array: &mut Array, value: &str) -> bool {
    let Some(index) = array.iter().position(|v| v.as_str() == Some(value)) else {
        return false;
    };
    let removed = array.remove(index);
    let prefix = removed
        .decor()
        .prefix()
        .and_then(|p| p.as_str())
        .unwrap_or("");
    if index == array.len() {
        if let Some(i) = prefix.rfind('\n') {
            let comment = &prefix[..i];
            if !comment.trim().is_empty() {
                let trailing = array.trailing().as_str().unwrap_or("").to_string();
                array.set_trailing(format!("{comment}{trailing}"));
            }
        }
    }
    true
}

/// Deep-merges `from` into `into`: tables merge key by key, everything else is replaced. This is
/// containerd 2.x's merge of imported plugin sections (containerd#9982).
pub fn deep_merge(into: &mut Table, from: &Table) {
    for (key, item) in from.iter() {
        match (into.get_mut(key), item.as_table_like()) {
            (Some(existing), Some(from_t)) if existing.is_table_like() => {
                let mut from_table = Table::new();
                for (k, v) in from_t.iter() {
                    from_table.insert(k, v.clone());
                }
                if existing.as_table().is_none() {
                    let taken = std::mem::take(existing);
                    *existing = taken.into_table().map(Item::Table).unwrap_or(Item::None);
                }
                if let Some(t) = existing.as_table_mut() {
                    deep_merge(t, &from_table);
                }
            }
            _ => {
                into.insert(key, item.clone());
            }
        }
    }
}

/// Strips comments, whitespace and document positions from a copied subtree, so that it prints
/// in a plain, predictable layout wherever it is inserted.
pub fn normalize(item: &mut Item) {
    struct Normalizer;
    impl VisitMut for Normalizer {
        fn visit_table_mut(&mut self, node: &mut Table) {
            node.decor_mut().clear();
            node.set_position(None);
            for (mut key, _) in node.iter_mut() {
                key.leaf_decor_mut().clear();
                key.dotted_decor_mut().clear();
            }
            visit_mut::visit_table_mut(self, node);
        }
        fn visit_value_mut(&mut self, node: &mut Value) {
            node.decor_mut().clear();
            visit_mut::visit_value_mut(self, node);
        }
        fn visit_array_mut(&mut self, node: &mut Array) {
            visit_mut::visit_array_mut(self, node);
            node.fmt();
        }
        fn visit_inline_table_mut(&mut self, node: &mut toml_edit::InlineTable) {
            visit_mut::visit_inline_table_mut(self, node);
            node.fmt();
        }
    }
    Normalizer.visit_item_mut(item);
}

#[cfg(test)]
mod tests {
    use super::*;
    use toml_edit::DocumentMut;

    fn doc(s: &str) -> DocumentMut {
        s.parse().expect("toml")
    }

    #[test]
    fn get_walks_tables_and_inline_tables() {
        let d = doc("[a]\nb = { c = 1 }\n");
        assert_eq!(
            get(d.as_table(), &["a", "b", "c"]).and_then(Item::as_integer),
            Some(1)
        );
        assert!(get(d.as_table(), &["a", "x"]).is_none());
    }

    #[test]
    fn table_mut_creates_implicit_tables() {
        let mut d = doc("x = 1\n");
        let t = table_mut(d.as_table_mut(), &["a", "b"], Path::new("/f"), "").expect("table");
        t.insert("k", toml_edit::value("v"));
        assert_eq!(d.to_string(), "x = 1\n\n[a.b]\nk = \"v\"\n");
    }

    #[test]
    fn table_mut_rejects_scalars_with_line() {
        let text = "x = 1\na = 2\n";
        let mut d = doc(text);
        let err =
            table_mut(d.as_table_mut(), &["a", "b"], Path::new("/f"), text).expect_err("scalar");
        assert_eq!(err.to_string(), "/f:2: `a` is not a table; make it a table, as the engine's documentation shows (the file was not changed)");
    }

    #[test]
    fn push_and_remove_keep_a_multi_line_array_layout() {
        let text = "imports = [\n  \"/a.toml\", # first\n]\n";
        let mut d = doc(text);
        let a = d
            .get_mut("imports")
            .and_then(Item::as_array_mut)
            .expect("array");
        push_like_last(a, "/b.toml");
        assert_eq!(
            d.to_string(),
            "imports = [\n  \"/a.toml\", # first\n  \"/b.toml\",\n]\n"
        );
        let a = d
            .get_mut("imports")
            .and_then(Item::as_array_mut)
            .expect("array");
        assert!(remove_keeping_comments(a, "/b.toml"));
        assert_eq!(d.to_string(), text);
        let mut d = doc("imports = [\"/a.toml\"]\n");
        let a = d
            .get_mut("imports")
            .and_then(Item::as_array_mut)
            .expect("array");
        push_like_last(a, "/b.toml");
        assert_eq!(d.to_string(), "imports = [\"/a.toml\", \"/b.toml\"]\n");
    }

    #[test]
    fn deep_merge_merges_tables_and_replaces_values() {
        let mut a = doc("[t]\nx = 1\ny = [1]\n[t.s]\nz = 1\n");
        let b = doc("[t]\ny = [2]\n[t.s]\nw = 2\n");
        deep_merge(a.as_table_mut(), b.as_table());
        let t = a.as_table();
        assert_eq!(get(t, &["t", "x"]).and_then(Item::as_integer), Some(1));
        assert_eq!(get(t, &["t", "y"]).and_then(string_array), None);
        assert_eq!(
            get(t, &["t", "y"])
                .and_then(Item::as_array)
                .map(|a| a.len()),
            Some(1)
        );
        assert_eq!(get(t, &["t", "s", "z"]).and_then(Item::as_integer), Some(1));
        assert_eq!(get(t, &["t", "s", "w"]).and_then(Item::as_integer), Some(2));
    }
}
