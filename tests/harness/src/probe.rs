//! The in-container probe: a busybox shell script that reports, for each path it is given, the
//! node's type, major:minor and mode and what opening it gives; for libraries, whether they are
//! read-only and known to the linker cache.
//!
//! Report lines:
//! - `node <path> <type> <major>:<minor> <mode> open=<ok|EPERM|ENOENT|notdev|other text>`
//!   (`notdev`: not a device node, so not opened)
//! - `lib <path> present=<yes|no> ro=<yes|no> ldcache=<yes|no>`

use std::collections::BTreeMap;

/// The script, written to `/probe.sh` in test rootfs.
pub const SCRIPT: &str = r#"#!/bin/sh
# usage: /probe.sh node PATH... -- lib PATH...
mode=node
for p in "$@"; do
  case "$p" in
    --) mode=lib; continue;;
  esac
  if [ "$mode" = node ]; then
    if [ -e "$p" ] || [ -c "$p" ] || [ -b "$p" ]; then
      info=$(stat -c '%t %T %a %F' "$p")
      set -- $info
      ty=other; maj=0; min=0; md=$3
      case "$info" in
        *character*) ty=c; maj=$1; min=$2;;
        *block*) ty=b; maj=$1; min=$2;;
      esac
      # Only device nodes are opened: opening a FIFO an image left there would block.
      res=notdev
      if [ "$ty" != other ]; then
        err=$( (exec 3< "$p") 2>&1 )
        case "$err" in
          "") res=ok;;
          *"not permitted"*) res=EPERM;;
          *"No such file"*) res=ENOENT;;
          *) res=$(echo "$err" | tr ' ' '_');;
        esac
      fi
      echo "node $p $ty $((0x$maj)):$((0x$min)) $md open=$res"
    else
      echo "node $p missing 0:0 0 open=ENOENT"
    fi
  else
    present=no; ro=no; cache=no
    [ -f "$p" ] && present=yes
    if [ "$present" = yes ]; then
      ( echo x >> "$p" ) 2>/dev/null || ro=yes
      name=$(basename "$p")
      ldconfig -p 2>/dev/null | grep -q "$name" && cache=yes
    fi
    echo "lib $p present=$present ro=$ro ldcache=$cache"
  fi
done
"#;

/// The container command that probes `nodes` and `libs`.
pub fn probe_args(nodes: &[&str], libs: &[&str]) -> Vec<String> {
    let mut v = vec!["/bin/sh".to_owned(), "/probe.sh".to_owned()];
    v.extend(nodes.iter().map(|s| s.to_string()));
    v.push("--".into());
    v.extend(libs.iter().map(|s| s.to_string()));
    v
}

/// One `node` report line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// `c`, `b`, `missing` or `other`.
    pub kind: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Octal mode text, e.g. `666`.
    pub mode: String,
    /// `ok`, `EPERM`, `ENOENT`, `notdev` (not a device node, not opened) or the shell's message.
    pub open: String,
}

/// One `lib` report line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibReport {
    /// The file exists.
    pub present: bool,
    /// Writing to it failed.
    pub read_only: bool,
    /// `ldconfig -p` lists it.
    pub in_ldcache: bool,
}

/// A parsed probe report.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Nodes by path.
    pub nodes: BTreeMap<String, NodeReport>,
    /// Libraries by path.
    pub libs: BTreeMap<String, LibReport>,
}

impl Report {
    /// Parses the probe's stdout (other lines are ignored).
    pub fn parse(out: &str) -> Self {
        let mut r = Self::default();
        for line in out.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["node", path, kind, mm, mode, open] => {
                    let (ma, mi) = mm.split_once(':').unwrap_or(("0", "0"));
                    r.nodes.insert(
                        (*path).into(),
                        NodeReport {
                            kind: (*kind).into(),
                            major: ma.parse().unwrap_or(0),
                            minor: mi.parse().unwrap_or(0),
                            mode: (*mode).into(),
                            open: open.trim_start_matches("open=").into(),
                        },
                    );
                }
                ["lib", path, present, ro, cache] => {
                    r.libs.insert(
                        (*path).into(),
                        LibReport {
                            present: *present == "present=yes",
                            read_only: *ro == "ro=yes",
                            in_ldcache: *cache == "ldcache=yes",
                        },
                    );
                }
                _ => {}
            }
        }
        r
    }

    /// The node report for `path`, panicking with the whole report when absent.
    pub fn node(&self, path: &str) -> &NodeReport {
        self.nodes
            .get(path)
            .unwrap_or_else(|| panic!("probe did not report {path}: {self:#?}"))
    }

    /// The library report for `path`, panicking with the whole report when absent.
    pub fn lib(&self, path: &str) -> &LibReport {
        self.libs
            .get(path)
            .unwrap_or_else(|| panic!("probe did not report {path}: {self:#?}"))
    }
    /// Asserts what a container given the host's `/dev/kvm` (the kvm profile, `all`) sees: the
    /// node as `c 10:232`, opening, and no `/dev/fuse`, which was not requested. `ctx` (the
    /// container's output) is shown on failure.
    pub fn assert_kvm_only(&self, ctx: &str) {
        let kvm = self.node("/dev/kvm");
        assert_eq!(
            (kvm.kind.as_str(), kvm.major, kvm.minor),
            ("c", 10, 232),
            "{ctx}"
        );
        assert_eq!(kvm.open, "ok", "{ctx}");
        assert_eq!(
            self.node("/dev/fuse").kind,
            "missing",
            "not requested: {ctx}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines() {
        let r = Report::parse(
            "noise\nnode /dev/demo/accel0 c 10:237 666 open=ok\nnode /dev/x missing 0:0 0 open=ENOENT\nlib /usr/lib/libdemo.so.1 present=yes ro=yes ldcache=no\n",
        );
        assert_eq!(r.node("/dev/demo/accel0").major, 10);
        assert_eq!(r.node("/dev/demo/accel0").open, "ok");
        assert_eq!(r.node("/dev/x").kind, "missing");
        assert!(r.lib("/usr/lib/libdemo.so.1").read_only);
        assert!(!r.lib("/usr/lib/libdemo.so.1").in_ldcache);
    }
}
