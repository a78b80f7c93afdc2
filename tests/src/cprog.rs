//! Tiny C programs the tests build with gcc: a preload library that leaves a marker wherever it
//! is loaded, a static "ldconfig" that records how it was run, plain shared libraries, and a
//! writer that changes a file through a shared mapping (a change inotify does not see).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Runs gcc on `source` (written to `dir/<name>.c`) with `args`, producing `out`.
fn gcc(dir: &Path, name: &str, source: &str, args: &[&str], out: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source)?;
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let o = Command::new("gcc")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(&src)
        .output()
        .context("run gcc")?;
    if !o.status.success() {
        bail!("gcc {name}: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(())
}

/// Prefix of every marker file: the preload library leaves `devinject-marker-preload-<pid>`;
/// tests' trap scripts use the same prefix.
pub const MARKER_PREFIX: &str = "devinject-marker-";

const PRELOAD_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Leaves a marker naming the process that loaded this library: in MARKER_DIR when that exists
   (a process on the host), else at / (a process in a chroot or container: its root). Also
   usable as a stand-in for any library an ld.so search path would find. */
__attribute__((constructor)) static void leave_marker(void) {
    char exe[512] = "?", path[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = 0;
    const char *dirs[2] = { MARKER_DIR, "" };
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/devinject-marker-preload-%d", dirs[i], (int)getpid());
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dprintf(fd, "loaded into %s\n", exe);
            close(fd);
            return;
        }
    }
}
"#;

/// Builds `out`, a shared library whose constructor writes `devinject-marker-preload-<pid>` into
/// `marker_dir` (a host path) when it can, else into `/` of whatever root the process has.
pub fn preload_marker(out: &Path, marker_dir: &Path) -> Result<()> {
    let define = format!("-DMARKER_DIR={:?}", marker_dir.to_string_lossy());
    let dir = out.parent().unwrap_or(Path::new("."));
    gcc(
        dir,
        "preload-marker",
        PRELOAD_C,
        &["-shared", "-fPIC", &define],
        out,
    )
}

/// The markers ([`MARKER_PREFIX`]) directly in `dir`, as `path: content`.
pub fn markers_in(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(MARKER_PREFIX))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            format!("{}: {}", e.path().display(), text.trim())
        })
        .collect()
}

/// Where the recorder writes, relative to its root.
pub const RECORD: &str = "/ldconfig-record";

const RECORDER_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* Stands in for ldconfig: records its arguments, environment, working directory and whether
   its root is the test rootfs (which holds /probe.sh), then succeeds. */
int main(int argc, char **argv, char **envp) {
    int fd = open("/ldconfig-record", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) return 1;
    for (int i = 0; i < argc; i++) dprintf(fd, "arg %s\n", argv[i]);
    for (char **e = envp; *e; e++) dprintf(fd, "env %s\n", *e);
    char cwd[4096];
    dprintf(fd, "cwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
    dprintf(fd, "rootfs %s\n", access("/probe.sh", F_OK) == 0 ? "yes" : "no");
    dprintf(fd, "end\n");
    close(fd);
    return 0;
}
"#;

/// Builds `out`, a static program that stands in for ldconfig and writes [`RECORD`] (its
/// arguments `arg ...`, environment `env ...`, `cwd ...`, `rootfs yes|no`, `end`).
pub fn ldconfig_recorder(out: &Path) -> Result<()> {
    let dir = out.parent().unwrap_or(Path::new("."));
    gcc(
        dir,
        "ldconfig-recorder",
        RECORDER_C,
        &["-static", "-O2"],
        out,
    )
}

/// Builds `dir/<file>`, a shared library with soname `soname`.
pub fn shared_lib(dir: &Path, file: &str, soname: &str) -> Result<PathBuf> {
    shared_lib_from(
        dir,
        file,
        soname,
        "int canary_function(void) { return 42; }\n",
    )
}

/// Builds `dir/<file>` from C `source`, a shared library with soname `soname`.
pub fn shared_lib_from(dir: &Path, file: &str, soname: &str, source: &str) -> Result<PathBuf> {
    let out = dir.join(file);
    let soname_flag = format!("-Wl,-soname,{soname}");
    gcc(dir, file, source, &["-shared", "-fPIC", &soname_flag], &out)?;
    Ok(out)
}

/// What [`demo_user`]'s program prints when it ran with the demo library loaded.
pub const DEMO_USER_OUTPUT: &str = "demo_version 1";

/// Builds `rootfs/usr/bin/demo-user`, a dynamically linked glibc program that needs
/// `libdemo.so.1` (linked against `demo_lib`, the demo library's host file) and prints
/// [`DEMO_USER_OUTPUT`], and copies the host's loader and libc in, at the paths the program
/// names: it runs in the container only when the dynamic loader finds the injected library
/// under its soname. Returns the directory libc went into, in the container (on Debian,
/// `/lib/x86_64-linux-gnu`): the image's library directory from then on, where the hook and the
/// shim put injected libraries.
pub fn demo_user(rootfs: &Path, demo_lib: &Path) -> Result<PathBuf> {
    let out = rootfs.join("usr/bin/demo-user");
    let lib_dir = demo_lib.parent().context("the demo library's directory")?;
    let file = demo_lib
        .file_name()
        .and_then(|n| n.to_str())
        .context("the demo library's file name")?;
    let build = rootfs.with_file_name("demo-user-build");
    gcc(
        &build,
        "demo-user",
        "#include <stdio.h>\nint demo_version(void);\nint main(void) { printf(\"demo_version %d\\n\", demo_version()); return 0; }\n",
        // Before the source, where the helper puts flags: kept only without `--as-needed`.
        &[
            "-O2",
            "-Wl,--no-as-needed",
            &format!("-L{}", lib_dir.display()),
            &format!("-l:{file}"),
        ],
        &out,
    )?;
    copy_linked_libraries(rootfs, &out)
}

/// Copies the host libraries `program` links (as `ldd` lists them: libc, the loader, ...) into
/// `rootfs` at the same paths, so the program runs there; libraries `ldd` does not find on the
/// host are left out. Returns the directory libc went into, in the container (on Debian,
/// `/lib/x86_64-linux-gnu`): the image's library directory, where the hook and the shim put
/// injected libraries.
pub fn copy_linked_libraries(rootfs: &Path, program: &Path) -> Result<PathBuf> {
    let ldd = Command::new("ldd")
        .arg(program)
        .output()
        .context("run ldd")?;
    let listing = String::from_utf8_lossy(&ldd.stdout);
    // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and `/lib64/ld-linux-x86-64.so.2
    // (0x...)`; a library only the container has is `not found` on the host, as it should be.
    let mut libc_dir = None;
    for line in listing.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        let Some(path) = path.filter(|p| p.starts_with('/')) else {
            continue;
        };
        let dest = rootfs.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().context("a library's directory")?)?;
        std::fs::copy(path, &dest).with_context(|| format!("copy {path} into the rootfs"))?;
        if line.trim_start().starts_with("libc.so") {
            libc_dir = Path::new(path).parent().map(Path::to_owned);
        }
    }
    libc_dir.with_context(|| format!("ldd names no libc for {}: {listing}", program.display()))
}

/// Builds `rootfs/usr/bin/<name>` from C `source`, a dynamically linked glibc program (gcc
/// `args` before the source), with the host libraries it links copied in
/// ([`copy_linked_libraries`]); returns the image's library directory.
pub fn glibc_program(rootfs: &Path, name: &str, source: &str, args: &[&str]) -> Result<PathBuf> {
    let out = rootfs.join("usr/bin").join(name);
    gcc(
        &rootfs.with_file_name(format!("{name}-build")),
        name,
        source,
        args,
        &out,
    )?;
    copy_linked_libraries(rootfs, &out)
}

const SHARED_MAP_WRITER_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* shared-map-writer FILE: maps FILE shared and closes it (the close of a descriptor open for
   writing is an IN_CLOSE_WRITE, so it happens here, once), says "mapped", then for each line
   read on stdin stores the line at the start of FILE, the rest of FILE newlines, msyncs and says
   "stored". A store to a shared mapping is no write(2): inotify raises no event for it
   (inotify(7), "Limitations and caveats"). */
int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
    int fd = open(argv[1], O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) { perror(argv[1]); return 1; }
    size_t size = (size_t)st.st_size;
    char *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { perror("mmap"); return 1; }
    close(fd);
    printf("mapped\n");
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        size_t len = strcspn(line, "\n");
        if (len > size) { fprintf(stderr, "%s: shorter than the text\n", argv[1]); return 1; }
        memcpy(map, line, len);
        memset(map + len, '\n', size - len);
        if (msync(map, size, MS_SYNC) != 0) { perror("msync"); return 1; }
        printf("stored\n");
        fflush(stdout);
    }
    return 0;
}
"#;

/// Builds `out`, the program [`SharedMapWriter`] runs.
pub fn shared_map_writer(out: &Path) -> Result<()> {
    let dir = out.parent().context("the writer's directory")?;
    gcc(dir, "shared-map-writer", SHARED_MAP_WRITER_C, &["-O1"], out)
}

/// A file changed through a shared mapping, which raises no inotify event, as a sysfs attribute
/// whose driver does not call `sysfs_notify` changes without one: the mapping is made (and the
/// descriptor closed, an `IN_CLOSE_WRITE`) when this is, each [`Self::store`] is a store to it.
pub struct SharedMapWriter {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl SharedMapWriter {
    /// Maps `file` with `program` (built by [`shared_map_writer`]).
    pub fn map(program: &Path, file: &Path) -> Result<Self> {
        let mut child = Command::new(program)
            .arg(file)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("run {}", program.display()))?;
        let stdin = child.stdin.take().context("its stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().context("its stdout")?);
        let mut writer = Self {
            child,
            stdin,
            stdout,
        };
        writer.answer("mapped")?;
        Ok(writer)
    }

    /// Stores `text` (one line) at the start of the file, the rest of it newlines.
    pub fn store(&mut self, text: &str) -> Result<()> {
        use std::io::Write;
        writeln!(self.stdin, "{text}").context("write to the writer")?;
        self.answer("stored")
    }

    fn answer(&mut self, expected: &str) -> Result<()> {
        use std::io::BufRead;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.trim_end() != expected {
            bail!("the writer said {line:?}, not {expected:?} (its error is on stderr)");
        }
        Ok(())
    }
}

impl Drop for SharedMapWriter {
    fn drop(&mut self) {
        // Its stdin closes with it; the kill is for a writer stuck on a fault.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
