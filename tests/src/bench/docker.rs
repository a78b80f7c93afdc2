//! Row 3: `docker run --device` against `docker run --runtime=devinject -e ...`.
//!
//! This needs a private docker engine (its own containerd and dockerd), which the test harness
//! does not have yet; until it does, the row says so instead of measuring a host daemon.

/// The outcome of row 3.
#[derive(Debug, Clone)]
pub enum DockerRow {
    /// Why the row was not measured.
    NotMeasured(String),
}

/// Measures row 3 when possible.
pub fn measure() -> DockerRow {
    DockerRow::NotMeasured(
        "not measured: the private-dockerd test harness (tests/src/docker.rs) is not on this \
         branch yet, and the benchmark does not touch the host's own docker daemon"
            .into(),
    )
}
