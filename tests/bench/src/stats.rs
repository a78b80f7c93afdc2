//! Samples and their summary: median with min and max, as the benchmark tables print them.

use std::fmt;
use std::time::Duration;

/// Timings of one measured thing, in the order they were taken.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<Duration>,
}

impl Samples {
    /// Adds one timing.
    pub fn push(&mut self, d: Duration) {
        self.values.push(d);
    }

    /// The number of timings.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The timings, in the order they were taken.
    pub fn values(&self) -> &[Duration] {
        &self.values
    }

    /// True when nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.values.clone();
        v.sort();
        v
    }

    /// The median (the mean of the middle two for an even count); zero when empty.
    pub fn median(&self) -> Duration {
        let v = self.sorted();
        match v.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2,
        }
    }

    /// The `q` quantile (0.0..=1.0), nearest rank; zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        let v = self.sorted();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }

    /// The smallest timing; zero when empty.
    pub fn min(&self) -> Duration {
        self.values.iter().copied().min().unwrap_or_default()
    }

    /// The largest timing; zero when empty.
    pub fn max(&self) -> Duration {
        self.values.iter().copied().max().unwrap_or_default()
    }

    /// `self.median() / base.median()`, or NaN when `base` is empty.
    pub fn ratio_to(&self, base: &Samples) -> f64 {
        let b = base.median().as_secs_f64();
        if b == 0.0 {
            f64::NAN
        } else {
            self.median().as_secs_f64() / b
        }
    }

    /// A `median [min–max]` view in milliseconds.
    pub fn ms(&self) -> Ms<'_> {
        Ms(self)
    }
}

impl FromIterator<Duration> for Samples {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Self {
        Self {
            values: iter.into_iter().collect(),
        }
    }
}

/// Formats [`Samples`] as `12.34 [11.90–15.02]` (milliseconds).
#[derive(Debug)]
pub struct Ms<'a>(&'a Samples);

impl fmt::Display for Ms<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("–");
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{} [{}–{}]",
            short(ms(self.0.median())),
            short(ms(self.0.min())),
            short(ms(self.0.max()))
        )
    }
}

/// Three significant figures at most, two decimals at most: `0.412`, `3.21`, `48.2`, `512`.
pub fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Peak memory figures in KiB, summarised the same way.
#[derive(Debug, Clone, Default)]
pub struct Kib {
    values: Vec<u64>,
}

impl Kib {
    /// Adds one figure.
    pub fn push(&mut self, kib: u64) {
        self.values.push(kib);
    }

    /// The largest figure.
    pub fn max(&self) -> u64 {
        self.values.iter().copied().max().unwrap_or(0)
    }

    /// The median figure.
    pub fn median(&self) -> u64 {
        let mut v = self.values.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }
}

impl fmt::Display for Kib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.values.is_empty() {
            return f.write_str("–");
        }
        let mib = |k: u64| k as f64 / 1024.0;
        write!(f, "{:.2} (max {:.2})", mib(self.median()), mib(self.max()))
    }
}

/// User plus system CPU time of every child of this process reaped so far, and the largest
/// peak RSS among them (KiB), from `getrusage(RUSAGE_CHILDREN)`. The difference across one
/// waited-for child is that child's CPU.
pub fn children_usage() -> anyhow::Result<(Duration, u64)> {
    usage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
}

/// The CPU (user + system) the calling thread has used so far.
pub fn thread_cpu() -> anyhow::Result<Duration> {
    Ok(usage(nix::sys::resource::UsageWho::RUSAGE_THREAD)?.0)
}

/// CPU (user + system) and peak RSS in KiB of `who`.
fn usage(who: nix::sys::resource::UsageWho) -> anyhow::Result<(Duration, u64)> {
    use nix::sys::resource::getrusage;
    let usage = getrusage(who).map_err(|e| anyhow::anyhow!("getrusage: {e}"))?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
    };
    Ok((
        tv(usage.user_time()) + tv(usage.system_time()),
        u64::try_from(usage.max_rss()).unwrap_or(0),
    ))
}

/// [`children_usage`]'s CPU alone.
pub fn children_cpu() -> anyhow::Result<Duration> {
    Ok(children_usage()?.0)
}

/// Parses `NAME=DIR`, the `--compare` argument of the benchmarks that compare two builds.
pub fn name_and_dir(arg: &str) -> Result<(String, std::path::PathBuf), String> {
    match arg.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() => {
            Ok((name.to_owned(), std::path::PathBuf::from(dir)))
        }
        _ => Err(format!(
            "{arg:?} is not NAME=DIR, e.g. glibc=target/image/bin/glibc"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(ms: &[u64]) -> Samples {
        ms.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn median_min_max_and_quantiles() {
        let s = samples(&[5, 1, 3]);
        assert_eq!(s.median(), Duration::from_millis(3));
        assert_eq!(
            (s.min(), s.max()),
            (Duration::from_millis(1), Duration::from_millis(5))
        );
        assert_eq!(samples(&[4, 1, 2, 3]).median(), Duration::from_micros(2500));
        let s = samples(&(1..=100).collect::<Vec<_>>());
        assert_eq!(s.quantile(0.99), Duration::from_millis(99));
        assert_eq!(s.quantile(0.5), Duration::from_millis(50));
        assert_eq!(Samples::default().median(), Duration::ZERO);
    }

    #[test]
    fn ratio_and_format() {
        let a = samples(&[10, 10, 10]);
        let b = samples(&[11, 11, 12]);
        assert!((b.ratio_to(&a) - 1.1).abs() < 1e-9);
        assert!(a.ratio_to(&Samples::default()).is_nan());
        assert_eq!(b.ms().to_string(), "11.0 [11.0–12.0]");
        assert_eq!(short(0.41234), "0.412");
        assert_eq!(short(512.3), "512");
    }
}
