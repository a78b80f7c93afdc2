//! Logging for the hook and the shim: tracing to stderr, which runtimes pass on to users.

/// Starts tracing with `level` (a tracing filter; `warn` when it does not parse). A plain writer
/// on stderr and no timestamps: no background thread, as the hook forks and joins namespaces.
pub fn init(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .init();
}
