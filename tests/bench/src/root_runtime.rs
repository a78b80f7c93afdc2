//! How the benchmarks that run a daemon on a simulated node start: as root (they make device
//! nodes with mknod), at the log level production runs, on one thread.

/// The runtime `bench` runs its daemon under; exits with status 2, naming `bench`, when not root.
/// `RUST_LOG` defaults to `info`: per-event debug logs would be measured too.
pub fn root_runtime(bench: &str) -> tokio::runtime::Runtime {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("{bench}: needs root (mknod)");
        std::process::exit(2);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "info");
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
