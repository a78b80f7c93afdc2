//! Row 9: start storms. N containers (one device, no library) are started at once, each by its
//! own `runc run`, as when a node drains onto another or a job array lands: the CPU is the
//! bottleneck, and whatever the hook or the shim spends per start is paid by every container.
//!
//! A round starts one batch of each variant in turn (native, hook, shim, native again: the A/A
//! pair), the order rotating from round to round. Every container of a batch gets its own bundle
//! and fresh rootfs, prepared before the batch; the threads then start their `runc run` together
//! (a barrier). Per start: spawn to exit, as in row 1. Per batch: the first spawn to the last
//! exit.

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use crate::host::BenchHost;
use crate::start::{Case, Setup, Variant};
use crate::stats::Samples;
use devinject_tests::runc::container_id;

/// The variants of a round, in their first order; the last is native again (A/A).
const VARIANTS: [Variant; 4] = [
    Variant::Native,
    Variant::Hook,
    Variant::Shim,
    Variant::Native,
];

/// One batch size's figures.
#[derive(Debug, Clone, Default)]
pub struct StormRow {
    /// Containers started at once.
    pub parallel: usize,
    /// Rounds measured.
    pub rounds: usize,
    /// Per start, then per batch, for native, hook, shim and native again.
    pub per_start: [Samples; 4],
    /// See [`StormRow::per_start`].
    pub batch: [Samples; 4],
}

/// Measures row 9 for each size in `sizes`, `rounds` rounds each (after one not counted).
pub fn measure(
    dir: &Path,
    setup: &Setup,
    host: &BenchHost,
    sizes: &[usize],
    rounds: usize,
) -> Result<Vec<StormRow>> {
    let mut rows = Vec::new();
    for &n in sizes {
        eprintln!("bench: start storm of {n}");
        // One set of cases per variant slot, each with its own bundle directories.
        let cases: Vec<Vec<Case>> = VARIANTS
            .iter()
            .enumerate()
            .map(|(slot, &v)| {
                (0..n)
                    .map(|i| Case::new(v, &dir.join(format!("{n}-{slot}-{i}")), setup, host))
                    .collect()
            })
            .collect::<Result<_>>()?;
        let mut row = StormRow {
            parallel: n,
            rounds,
            ..StormRow::default()
        };
        for round in 0..=rounds {
            for k in 0..VARIANTS.len() {
                let slot = (k + round) % VARIANTS.len();
                let (starts, batch) = batch(&cases[slot])?;
                if round == 0 {
                    continue;
                }
                for s in starts {
                    row.per_start[slot].push(s);
                }
                row.batch[slot].push(batch);
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Starts every case at once; each start's time, and the whole batch's.
fn batch(cases: &[Case]) -> Result<(Vec<Duration>, Duration)> {
    let gate = Barrier::new(cases.len());
    let results: Vec<Result<(Instant, Duration)>> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|c| {
                let gate = &gate;
                s.spawn(move || c.start_after(&container_id("storm"), gate))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a start thread panicked")))
            })
            .collect()
    });
    let timed = results.into_iter().collect::<Result<Vec<_>>>()?;
    let first = timed.iter().map(|(at, _)| *at).min().expect("a batch");
    let last = timed.iter().map(|(at, d)| *at + *d).max().expect("a batch");
    Ok((timed.iter().map(|(_, d)| *d).collect(), last - first))
}
