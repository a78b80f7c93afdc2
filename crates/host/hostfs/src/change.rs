//! What a write to host files did: one changed file and its diff, for reports and `--dry-run`.

use std::fmt;
use std::path::PathBuf;

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The file did not exist and was (or would be) created.
    Create,
    /// The file was (or would be) changed.
    Modify,
    /// The file was (or would be) removed.
    Remove,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Create => "create",
            Action::Modify => "modify",
            Action::Remove => "remove",
        })
    }
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Host path of the file.
    pub path: PathBuf,
    /// What was done to it.
    pub action: Action,
    /// Unified diff from the old to the new content.
    pub diff: String,
}
