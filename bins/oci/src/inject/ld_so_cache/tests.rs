//! The cache format against glibc's own tools: this host's ldconfig reads what we write, and
//! sorts as we do.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

const NATIVE: i32 = 0x0303;

fn lib(soname: &str, path: &str) -> Library {
    Library {
        soname: soname.into(),
        path: PathBuf::from(path),
        flags: NATIVE,
    }
}

fn entry(flags: i32, name: &str, path: &str, hwcap: u64) -> Entry {
    Entry {
        flags,
        name: name.into(),
        path: path.into(),
        hwcap,
    }
}

/// Root and a glibc ldconfig on x86-64, or a skip by the one rule ([`devinject_testkit`]).
fn have_root_and_ldconfig() -> bool {
    devinject_testkit::require(
        nix::unistd::geteuid().is_root(),
        "needs root (ldconfig -r chroots)",
    ) && devinject_testkit::require(
        Path::new("/sbin/ldconfig").exists() && cfg!(target_arch = "x86_64"),
        "needs glibc's /sbin/ldconfig on x86-64",
    )
}

/// `ldconfig -p` of a cache file, without its header and trailer lines.
fn ldconfig_p(cache: &Path) -> Vec<String> {
    let out = Command::new("/sbin/ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" => "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn round_trips_entries_flags_hwcaps() {
    let cache = Cache {
        entries: vec![
            entry(NATIVE, "libz.so.1", "/lib/libz.so.1", 0),
            entry(
                NATIVE,
                "liba.so.1",
                "/usr/lib/glibc-hwcaps/x86-64-v3/liba.so.1",
                HWCAP_EXTENSION | (3 << 32) | 1,
            ),
            entry(NATIVE, "liba.so.1", "/usr/lib/liba.so.1", 0),
            entry(0x0003, "liba.so.1", "/usr/lib32/liba.so.1", 0),
        ],
        hwcaps: vec![b"x86-64-v2".to_vec(), b"x86-64-v3".to_vec()],
    };
    let bytes = cache.to_bytes();
    assert_eq!(Cache::parse(&bytes).unwrap(), cache);
    assert_eq!(Cache::parse(&[]).unwrap(), Cache::default());
    assert_eq!(
        Cache::parse(&Cache::default().to_bytes()).unwrap(),
        Cache::default()
    );
}

#[test]
fn ours_come_first_among_equals_and_duplicates_go() {
    let mut cache = Cache {
        entries: vec![
            entry(
                NATIVE,
                "libcuda.so.1",
                "/usr/local/cuda/compat/libcuda.so.1",
                0,
            ),
            entry(NATIVE, "libb.so.1", "/usr/lib/libb.so.1", 0),
        ],
        hwcaps: vec![],
    };
    let libs = [
        lib("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        lib("libb.so.1", "/usr/lib/libb.so.1"),
    ];
    assert!(!cache.finds_all(&libs));
    cache.add(&libs);
    let got: Vec<(&[u8], &[u8])> = cache
        .entries
        .iter()
        .map(|e| (&e.name[..], &e.path[..]))
        .collect();
    assert_eq!(
        got,
        [
            (
                &b"libcuda.so.1"[..],
                &b"/usr/lib/x86_64-linux-gnu/libcuda.so.1"[..]
            ),
            (b"libcuda.so.1", b"/usr/local/cuda/compat/libcuda.so.1"),
            (b"libb.so.1", b"/usr/lib/libb.so.1"),
        ]
    );
    assert!(cache.finds_all(&libs));
    // Adding again changes nothing: a restarted container's cache is rewritten identically.
    let once = cache.to_bytes();
    cache.add(&libs);
    assert_eq!(cache.to_bytes(), once);
}

#[test]
fn damaged_and_foreign_files_are_unsupported() {
    let good = Cache {
        entries: vec![entry(NATIVE, "liba.so.1", "/usr/lib/liba.so.1", 0)],
        hwcaps: vec![],
    }
    .to_bytes();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"not a cache at all".to_vec()),
        ("old format only", {
            let mut v = MAGIC_OLD.to_vec();
            v.resize(OLD_HEADER, 0);
            v
        }),
        ("truncated header", good[..30].to_vec()),
        ("truncated entries", good[..HEADER + 10].to_vec()),
        ("entry count past the end", {
            let mut v = good.clone();
            v[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
            v
        }),
        ("string offset past the end", {
            let mut v = good.clone();
            v[HEADER + 4..HEADER + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
            v
        }),
        ("other byte order", {
            let mut v = good.clone();
            v[28] = if ENDIAN_CURRENT == 2 { 3 } else { 2 };
            v
        }),
        ("hwcaps index without a section", {
            let mut v = good.clone();
            v[HEADER + 16..HEADER + 24].copy_from_slice(&(HWCAP_EXTENSION | 5).to_ne_bytes());
            v
        }),
        ("extension directory misplaced", {
            let mut v = good.clone();
            v[32..36].copy_from_slice(&7u32.to_ne_bytes());
            v
        }),
    ];
    for (what, bytes) in cases {
        assert!(Cache::parse(&bytes).is_err(), "{what} was accepted");
    }
    // A string running to the end of the file (the generator has no NUL) is refused.
    let mut v = good.clone();
    let end = (v.len() - 3) as u32;
    v[HEADER + 4..HEADER + 8].copy_from_slice(&end.to_ne_bytes());
    assert_eq!(
        Cache::parse(&v),
        Err(Unsupported::Damaged("unterminated or overlong string"))
    );
}

#[test]
fn compat_layout_is_read_from_its_new_part() {
    // Old header with two old entries, padding to 8, then a new-format cache whose string
    // offsets are relative to its own header.
    let new = Cache {
        entries: vec![entry(NATIVE, "liba.so.1", "/usr/lib/liba.so.1", 0)],
        hwcaps: vec![],
    };
    let mut file = MAGIC_OLD.to_vec();
    file.resize(12, 0);
    file.extend(2u32.to_ne_bytes());
    file.extend([0u8; 2 * OLD_ENTRY]);
    file.resize(file.len().next_multiple_of(8), 0);
    let mut new_bytes = new.to_bytes();
    // Drop the extension directory: compat files from glibc < 2.32 have none.
    new_bytes[32..36].copy_from_slice(&0u32.to_ne_bytes());
    file.extend(new_bytes);
    assert_eq!(Cache::parse(&file).unwrap(), new);
}

/// This host's cache, parsed and written again by us, reads back through glibc's ldconfig with
/// the same lines in the same order.
#[test]
fn ldconfig_reads_our_rewrite_of_the_hosts_cache() {
    if !have_root_and_ldconfig() {
        return;
    }
    let host = std::fs::read("/etc/ld.so.cache").unwrap();
    let cache = Cache::parse(&host).unwrap();
    assert!(!cache.entries.is_empty());
    let t = tempfile::tempdir().unwrap();
    let ours = t.path().join("ld.so.cache");
    std::fs::write(&ours, cache.to_bytes()).unwrap();
    assert_eq!(ldconfig_p(&ours), ldconfig_p(Path::new("/etc/ld.so.cache")));
}

/// Libraries with names that exercise every rule of the order (numbers, digits against
/// letters, case, 32- and 64-bit, one soname in two directories) come out of [`Cache::add`] in
/// exactly the order glibc's ldconfig writes for them.
#[test]
fn sorts_exactly_as_ldconfig() {
    if !have_root_and_ldconfig() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let names = [
        ("d1", "libfoo.so.9", false),
        ("d1", "libfoo.so.10", false),
        ("d1", "libfoo.so.1", true),
        ("d1", "libFoo.so.1", false),
        ("d1", "lib2x.so.1", false),
        ("d1", "libx.so.1", false),
        ("d1", "libx.so", false),
        ("d1", "libab-1.2.so.3", false),
        ("d1", "libab-1.10.so.3", false),
        ("d2", "libfoo.so.1", false),
        ("d2", "libx.so.1", false),
    ];
    let src = root.join("lib.c");
    std::fs::write(&src, "int devinject_test_symbol(void) { return 1; }\n").unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/ld.so.conf"), "/d1\n/d2\n").unwrap();
    // Older ldconfigs (Debian 12's glibc 2.36) list a 32-bit library as a libc6 one only when it
    // needs libc.so.6; newer ones always do, as we do. Give it a stand-in libc to link against.
    let stub = root.join("stub/libc.so.6");
    std::fs::create_dir_all(stub.parent().unwrap()).unwrap();
    let m32 = Command::new("gcc")
        .args([
            "-m32",
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-Wl,-soname,libc.so.6",
            "-o",
        ])
        .arg(&stub)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    let mut libs = Vec::new();
    for (dir, soname, is_m32) in names {
        if is_m32 && !m32 {
            // No 32-bit toolchain: that one library is left out.
            continue;
        }
        std::fs::create_dir_all(root.join(dir)).unwrap();
        let path = root.join(dir).join(soname);
        let mut gcc = Command::new("gcc");
        gcc.args(["-shared", "-fPIC", "-nostdlib"]);
        if is_m32 {
            gcc.args(["-m32", "-Wl,--no-as-needed"]).arg(&stub);
        }
        let out = gcc
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(&path)
            .arg(&src)
            .output()
            .unwrap();
        assert!(out.status.success(), "gcc: {out:?}");
        libs.push(Library {
            soname: soname.into(),
            path: PathBuf::from(format!("/{dir}/{soname}")),
            flags: elf_flags::read(&path).unwrap(),
        });
    }
    let status = Command::new("/sbin/ldconfig")
        .arg("-r")
        .arg(root)
        .arg("-X")
        .env_clear()
        .status()
        .unwrap();
    assert!(status.success());
    let theirs = Cache::parse(&std::fs::read(root.join("etc/ld.so.cache")).unwrap()).unwrap();
    // ldconfig puts the directory listed first first among equals; so do we for libraries
    // added in that order.
    let mut ours = Cache::default();
    ours.add(&libs);
    let view = |c: &Cache| -> Vec<(String, String, i32)> {
        c.entries
            .iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(&e.name).into_owned(),
                    String::from_utf8_lossy(&e.path).into_owned(),
                    e.flags,
                )
            })
            .collect()
    };
    assert_eq!(view(&ours), view(&theirs));
    // And ldconfig reads ours as it reads its own.
    let file = root.join("ours.cache");
    std::fs::write(&file, ours.to_bytes()).unwrap();
    assert_eq!(ldconfig_p(&file), ldconfig_p(&root.join("etc/ld.so.cache")));
}

/// The real loader resolves through a cache we wrote: a program linked against a library in a
/// directory ld.so never searches on its own (no rpath, no `LD_LIBRARY_PATH`) runs once our
/// cache, the host's plus that library, is mounted as `/etc/ld.so.cache` in a private mount
/// namespace; and the host's own programs still find their libraries through it.
#[test]
fn the_loader_finds_libraries_through_our_cache() {
    if !have_root_and_ldconfig() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("not-searched");
    std::fs::create_dir_all(&dir).unwrap();
    let lib_src = t.path().join("lib.c");
    std::fs::write(&lib_src, "int devinject_probe(void) { return 42; }\n").unwrap();
    let file = dir.join("libdevinjectprobe.so.1.0.0");
    let gcc = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("gcc").args(args).output().unwrap();
        assert!(out.status.success(), "gcc: {out:?}");
    };
    gcc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-Wl,-soname,libdevinjectprobe.so.1".as_ref(),
        "-o".as_ref(),
        file.as_os_str(),
        lib_src.as_os_str(),
    ]);
    std::os::unix::fs::symlink(
        "libdevinjectprobe.so.1.0.0",
        dir.join("libdevinjectprobe.so.1"),
    )
    .unwrap();
    let prog_src = t.path().join("prog.c");
    std::fs::write(
        &prog_src,
        "int devinject_probe(void);\nint main(void) { return devinject_probe() == 42 ? 0 : 1; }\n",
    )
    .unwrap();
    let prog = t.path().join("prog");
    gcc(&[
        "-o".as_ref(),
        prog.as_os_str(),
        prog_src.as_os_str(),
        file.as_os_str(),
    ]);

    let run_with = |cache: &Path| {
        let script = format!(
            "mount --make-rprivate / && mount --bind {} /etc/ld.so.cache && {} && /bin/ls / >/dev/null",
            cache.display(),
            prog.display()
        );
        Command::new("unshare")
            .args(["-m", "/bin/sh", "-c", &script])
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap()
    };
    // Without the entry the loader cannot find it: the test can fail.
    let host = std::fs::read("/etc/ld.so.cache").unwrap();
    let plain = t.path().join("plain.cache");
    std::fs::write(&plain, &host).unwrap();
    assert!(!run_with(&plain).status.success());

    let mut cache = Cache::parse(&host).unwrap();
    cache.add(&[Library {
        soname: "libdevinjectprobe.so.1".into(),
        path: dir.join("libdevinjectprobe.so.1"),
        flags: elf_flags::read(&file).unwrap(),
    }]);
    let ours = t.path().join("ours.cache");
    std::fs::write(&ours, cache.to_bytes()).unwrap();
    let out = run_with(&ours);
    assert!(out.status.success(), "{out:?}");
}

mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::super::*;

    fn name() -> impl Strategy<Value = Vec<u8>> {
        vec(
            prop_oneof![b'a'..=b'z', b'0'..=b'9', Just(b'.'), 0x80u8..=0xff],
            1..12,
        )
    }

    /// Sonames made to stress the comparator and the string budget.
    fn adversarial_name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            "lib[0-9]{1,40}\\.so(\\.[0-9]{1,30})?".prop_map(String::into_bytes),
            (0u64..4).prop_map(|k| format!("lib{}.so", 5 + (k << 31)).into_bytes()),
            (0usize..300).prop_map(|k| format!("lib{}{k}.so.1", "a".repeat(200)).into_bytes()),
            Just(b"libsame.so.1".to_vec()),
            vec(
                prop_oneof![b'a'..=b'z', b'0'..=b'9', Just(b'.'), 0x80u8..=0xff],
                1..64
            ),
        ]
    }

    fn cache() -> impl Strategy<Value = Cache> {
        let hwcaps = vec(name(), 0..3);
        hwcaps.prop_flat_map(|hwcaps| {
            let n = hwcaps.len() as u64;
            let hwcap = if n == 0 {
                Just(0u64).boxed()
            } else {
                prop_oneof![Just(0u64), (0..n).prop_map(|i| HWCAP_EXTENSION | i)].boxed()
            };
            let entry = (
                prop_oneof![Just(0x0303), Just(0x0003), Just(1)],
                name(),
                name(),
                hwcap,
            )
                .prop_map(|(flags, name, path, hwcap)| Entry {
                    flags,
                    name,
                    path,
                    hwcap,
                });
            (vec(entry, 0..20), Just(hwcaps))
                .prop_map(|(entries, hwcaps)| Cache { entries, hwcaps })
        })
    }

    proptest! {
        // Each case merges thousands of entries: fewer cases than the default.
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        /// Amplification and ordering as a property: large caches (thousands of entries) whose
        /// names are built to hurt the merge (digit runs far past 2^64, numbers 2^31 apart, one
        /// long shared prefix, the same name over and over, bytes past ASCII) merge without a
        /// panic, into an order ldconfig's comparator accepts as total (merging again changes
        /// nothing), and into an output bounded by the input's size.
        #[test]
        fn large_adversarial_caches_merge_within_a_bound_of_their_size(
            names in vec(adversarial_name(), 1..48),
            n in 2_000usize..12_000,
            libs in vec(adversarial_name(), 1..4),
        ) {
            let entries = (0..n)
                .map(|i| {
                    // Names repeat with a suffix, as in a real cache (one entry per soname);
                    // a cache naming one string thousands of times is refused as amplifying
                    // (`caches_that_amplify_are_refused_and_what_is_accepted_stays_linear`).
                    let mut name = names[i % names.len()].clone();
                    name.extend_from_slice(format!(".{}", i / names.len()).as_bytes());
                    let mut path = b"/usr/lib/".to_vec();
                    path.extend_from_slice(&name);
                    Entry { flags: 0x0303, name, path, hwcap: 0 }
                })
                .collect();
            let file = Cache { entries, hwcaps: Vec::new() }.to_bytes();
            let mut cache = Cache::parse(&file).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            let libs: Vec<Library> = libs
                .into_iter()
                .filter(|l| seen.insert(l.clone()))
                .map(|l| {
                    let soname = String::from_utf8_lossy(&l).into_owned();
                    Library { path: std::path::Path::new("/opt/x").join(&soname), soname, flags: 0x0303 }
                })
                .collect();
            cache.add(&libs);
            let out = cache.to_bytes();
            let added: usize = libs.iter().map(|l| l.soname.len() + l.path.as_os_str().len() + 2).sum();
            let bound = Cache::output_bound(file.len(), cache.entries.len(), added);
            prop_assert!(out.len() <= bound, "{} bytes out of {} in (bound {bound})", out.len(), file.len());
            let mut again = Cache::parse(&out).unwrap();
            prop_assert!(again.finds_all(&libs));
            again.add(&libs);
            prop_assert_eq!(again.to_bytes(), out);
        }
    }

    proptest! {
        #[test]
        fn what_we_write_reads_back(c in cache()) {
            prop_assert_eq!(Cache::parse(&c.to_bytes()).unwrap(), c);
        }

        #[test]
        fn added_libraries_are_found_and_adding_twice_changes_nothing(
            mut c in cache(),
            libs in vec(("[a-z]{1,6}\\.so\\.[0-9]{1,2}", "/[a-z]{1,6}"), 1..5),
        ) {
            let libs: Vec<Library> = libs
                .into_iter()
                .map(|(soname, dir)| Library {
                    path: std::path::Path::new(&dir).join(&soname),
                    soname,
                    flags: 0x0303,
                })
                .collect();
            // One path per soname: two injected files cannot share a name in one directory.
            let mut seen = std::collections::BTreeSet::new();
            let libs: Vec<Library> = libs.into_iter().filter(|l| seen.insert(l.soname.clone())).collect();
            c.add(&libs);
            prop_assert!(c.finds_all(&libs));
            let once = c.to_bytes();
            c.add(&libs);
            prop_assert_eq!(c.to_bytes(), once);
        }

        #[test]
        fn damaged_files_never_panic(c in cache(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
            let mut bytes = c.to_bytes();
            let i = at.index(bytes.len());
            bytes[i] = byte;
            let _ = Cache::parse(&bytes);
            bytes.truncate(cut.index(bytes.len()));
            let _ = Cache::parse(&bytes);
        }
    }
}

/// A cache in the compat layout (the old libc5 table with the new format inside, what glibc
/// before 2.32 wrote by default), written by this host's ldconfig: we read the same entries as
/// from the same ldconfig's current format.
#[test]
fn reads_the_compat_layout_ldconfig_writes() {
    if !have_root_and_ldconfig() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    // ldconfig always saves its aux cache: give it a private one, so the host's stays as it was.
    std::fs::create_dir_all("/var/cache/ldconfig").unwrap();
    let write = |format: &str| {
        let path = t.path().join(format);
        let script = format!(
            "mount --make-rprivate / && mount -t tmpfs none /var/cache/ldconfig && /sbin/ldconfig -X -c {format} -C {}",
            path.display()
        );
        let out = Command::new("unshare")
            .args(["-m", "/bin/sh", "-c", &script])
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::read(path).unwrap()
    };
    let compat = write("compat");
    let new = write("new");
    assert!(compat.starts_with(MAGIC_OLD));
    let (compat, new) = (Cache::parse(&compat).unwrap(), Cache::parse(&new).unwrap());
    assert!(!new.entries.is_empty());
    assert_eq!(compat.entries, new.entries);
}

/// A cache of `n` entries whose names and paths point at offset `i % spread` of one string of
/// `len` bytes: every entry a different suffix of the same text.
fn suffix_bomb(n: usize, len: usize, spread: usize) -> Vec<u8> {
    let table = HEADER + n * ENTRY;
    let mut v = MAGIC_NEW.to_vec();
    v.extend((n as u32).to_ne_bytes());
    v.extend(((len + 1) as u32).to_ne_bytes());
    v.extend([ENDIAN_CURRENT, 0, 0, 0]);
    v.resize(HEADER, 0);
    for i in 0..n {
        let off = (table + i % spread) as u32;
        for word in [NATIVE as u32, off, off, 0] {
            v.extend(word.to_ne_bytes());
        }
        v.extend(0u64.to_ne_bytes());
    }
    v.extend(std::iter::repeat_n(b'a', len));
    v.push(0);
    v
}

/// 100,000 entries pointing into a few KiB of strings would take gigabytes and write a cache
/// hundreds of times the input: such caches are refused, and what is accepted stays linear in the
/// input.
#[test]
fn caches_that_amplify_are_refused_and_what_is_accepted_stays_linear() {
    for (n, len, spread) in [(100_000, 4000, 4000), (100_000, 4000, 1)] {
        assert_eq!(
            Cache::parse(&suffix_bomb(n, len, spread)),
            Err(Unsupported::Damaged(
                "its entries name far more text than it holds"
            )),
            "{n} entries into {len} bytes at {spread} offsets"
        );
    }
    // Strings about as long as the entries that name them, as in real caches: accepted, and
    // the output is bounded by the input.
    for (n, len, spread) in [(20_000, 40, 40), (2_000, 100, 100), (8, 4000, 1)] {
        let file = suffix_bomb(n, len, spread);
        let mut cache = Cache::parse(&file).unwrap_or_else(|e| panic!("{n} {len} {spread}: {e}"));
        cache.add(&[lib("libx.so.1", "/usr/lib/libx.so.1")]);
        let out = cache.to_bytes();
        let bound = Cache::output_bound(file.len(), cache.entries.len(), 64);
        assert!(
            out.len() <= bound,
            "{n} {len} {spread}: {} > {bound}",
            out.len()
        );
    }
}

#[test]
fn a_library_is_cached_under_its_soname_link_and_its_other_links() {
    use devinject_devices::{Mount, MountKind, Symlink};
    let dir = Path::new("/usr/lib/x86_64-linux-gnu");
    let mount = Mount {
        host_path: PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
        container_path: dir.join("libcuda.so.535.309.01"),
        kind: MountKind::Library,
    };
    let link = |name: &str, target: &str| Symlink {
        link: dir.join(name),
        target: target.into(),
    };
    let links = [
        link("libcuda.so.1", "libcuda.so.535.309.01"),
        link("libcuda.so", "libcuda.so.1"),
        // Another directory's link of the same name is not this library's.
        Symlink {
            link: PathBuf::from("/lib/libcuda.so"),
            target: "libcuda.so.1".into(),
        },
    ];
    let libs = update::libraries([&mount], &links).unwrap().unwrap();
    let names: Vec<(&str, &Path)> = libs
        .iter()
        .map(|l| (l.soname.as_str(), l.path.as_path()))
        .collect();
    assert_eq!(
        names,
        [
            ("libcuda.so.1", dir.join("libcuda.so.1").as_path()),
            ("libcuda.so", dir.join("libcuda.so").as_path()),
        ]
    );
    assert_eq!(libs[0].flags, libs[1].flags);
}
