//! Following the log: the decisions appended since the last look, for a metrics counter.
//!
//! The follower holds the log it reads open, so a rotation loses nothing of it: when the name
//! `decisions.log` holds another file, the rest of the held one is read first, then
//! `decisions.log.1` when that is not the held one (a whole log written and rotated between two
//! polls), then the new log from its start. Each poll reads at most [`MAX_READ_BYTES`] of each
//! file; the rest of the current log comes with the next poll. Only whole lines are taken;
//! lines that are not decisions are counted ([`Follower::malformed`]) and skipped.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::decision::{parse_lines, Decision, MAX_LINE_BYTES};
use crate::dir::{size, Access, Identity, LogDir, LOG_NAME, ROTATED_NAME};
use crate::error::{DecisionLogError, Result};
use crate::tail::MAX_READ_BYTES;

/// The log file being followed, open, and how far it was read.
struct Held {
    file: File,
    id: Identity,
    offset: u64,
}

/// Follows `<dir>/decisions.log` across rotations.
pub struct Follower {
    dir: PathBuf,
    held: Option<Held>,
    malformed: u64,
}

impl Follower {
    /// A follower of the log in `dir` that starts at its end now: decisions recorded before
    /// are not returned. A missing or unreadable log is followed from its start once it
    /// appears.
    pub fn new(dir: &Path) -> Self {
        let mut f = Self::from_start(dir);
        if let Ok(Some(d)) = LogDir::open(dir, false) {
            if let Ok(Some((file, st))) = d.open_file(LOG_NAME, Access::Read) {
                f.held = Some(Held {
                    file,
                    id: Identity::of(&st),
                    offset: size(&st),
                });
            }
        }
        f
    }

    /// A follower that returns the current log's decisions too.
    pub fn from_start(dir: &Path) -> Self {
        Follower {
            dir: dir.to_owned(),
            held: None,
            malformed: 0,
        }
    }

    /// How many lines were skipped as not decisions, in all polls.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// The decisions appended since the previous poll, oldest first.
    pub fn poll(&mut self) -> Result<Vec<Decision>> {
        let Some(dir) = LogDir::open(&self.dir, false)? else {
            self.held = None;
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let now = dir.stat(LOG_NAME)?;
        let rotated = match (&self.held, &now) {
            (Some(held), Some(st)) => held.id != Identity::of(st),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if let Some(mut held) = self.held.take_if(|_| rotated) {
            self.read(&dir, LOG_NAME, &mut held, &mut out)?;
            if let Some((file, st)) = dir.open_file(ROTATED_NAME, Access::Read)? {
                if Identity::of(&st) != held.id {
                    let mut between = Held {
                        file,
                        id: Identity::of(&st),
                        offset: 0,
                    };
                    self.read(&dir, ROTATED_NAME, &mut between, &mut out)?;
                }
            }
        }
        if self.held.is_none() {
            self.held = dir
                .open_file(LOG_NAME, Access::Read)?
                .map(|(file, st)| Held {
                    file,
                    id: Identity::of(&st),
                    offset: 0,
                });
        }
        if let Some(mut held) = self.held.take() {
            let read = self.read(&dir, LOG_NAME, &mut held, &mut out);
            self.held = Some(held);
            read?;
        }
        Ok(out)
    }

    /// Reads the whole lines of `held` after its offset, at most [`MAX_READ_BYTES`], into
    /// `out`, and moves the offset past them.
    fn read(
        &mut self,
        dir: &LogDir,
        name: &str,
        held: &mut Held,
        out: &mut Vec<Decision>,
    ) -> Result<()> {
        let err = |source| DecisionLogError::Io {
            op: "read",
            path: dir.file_path(name),
            source,
        };
        let len = held.file.metadata().map_err(err)?.len();
        if len < held.offset {
            // Cut short by hand: read it again from the start.
            held.offset = 0;
        }
        let want = usize::try_from((len - held.offset).min(MAX_READ_BYTES)).unwrap_or(0);
        let mut bytes = vec![0; want];
        let mut got = 0;
        while got < want {
            match held
                .file
                .read_at(&mut bytes[got..], held.offset + got as u64)
            {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        bytes.truncate(got);
        let whole = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            // No newline in more than a line's worth: not a line; skip it.
            None if bytes.len() > MAX_LINE_BYTES => {
                self.malformed += 1;
                held.offset += bytes.len() as u64;
                return Ok(());
            }
            None => 0,
        };
        let (decisions, malformed) = parse_lines(&bytes[..whole]);
        self.malformed += malformed;
        out.extend(decisions);
        held.offset += whole as u64;
        Ok(())
    }
}
