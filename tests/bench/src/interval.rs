//! How sure a ratio or a difference of medians is: a 95% interval by resampling rounds.
//!
//! The benchmarks that alternate their variants within rounds take one sample of each variant
//! per round, so sample `i` of every variant was taken at about the same time, under the same
//! load. Resampling whole rounds (the same indices for both variants) keeps that pairing: the
//! interval then holds what the rounds disagree on, not the drift of the machine's load over
//! the run, which both variants share.

use std::time::Duration;

use crate::stats::Samples;

/// Resamples per interval.
pub const RESAMPLES: usize = 2000;

/// The 2.5% and 97.5% quantiles of `median(a) / median(base)` over `resamples` resamples of
/// the rounds (paired by index; the shorter length is used). `None` with fewer than two rounds.
/// Deterministic: the same samples give the same interval.
pub fn ratio_of_medians(a: &Samples, base: &Samples, resamples: usize) -> Option<(f64, f64)> {
    paired(a, base, resamples, |a, b| a.ratio_to(b))
}

/// The 2.5% and 97.5% quantiles of `median(a) - median(base)`, in milliseconds, resampled as
/// [`ratio_of_medians`] does: how sure "what `a` adds to `base`" is.
pub fn difference_of_medians(a: &Samples, base: &Samples, resamples: usize) -> Option<(f64, f64)> {
    paired(a, base, resamples, median_difference_ms)
}

/// `median(a) - median(base)` in milliseconds.
fn median_difference_ms(a: &Samples, base: &Samples) -> f64 {
    (a.median().as_secs_f64() - base.median().as_secs_f64()) * 1e3
}

/// `median(a) - median(base)` in milliseconds with its 95% interval, as a table cell:
/// `+2.6 [+1.5, +3.5]`.
pub fn difference_cell(a: &Samples, base: &Samples) -> String {
    let point = median_difference_ms(a, base);
    match difference_of_medians(a, base, RESAMPLES) {
        Some((lo, hi)) => format!("{point:+.1} [{lo:+.1}, {hi:+.1}]"),
        None => format!("{point:+.1}"),
    }
}

/// The 95% interval of `statistic(a, base)` over resamples of whole rounds.
fn paired(
    a: &Samples,
    base: &Samples,
    resamples: usize,
    statistic: impl Fn(&Samples, &Samples) -> f64,
) -> Option<(f64, f64)> {
    let a = a.values();
    let b = base.values();
    let n = a.len().min(b.len());
    if n < 2 || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64(0x5eed_0fde_711e_7c00);
    let mut values: Vec<f64> = (0..resamples)
        .map(|_| {
            let rounds: Vec<usize> = (0..n).map(|_| rng.below(n)).collect();
            let pick = |v: &[Duration]| rounds.iter().map(|&i| v[i]).collect::<Samples>();
            statistic(&pick(a), &pick(b))
        })
        .filter(|r| r.is_finite())
        .collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((q * values.len() as f64) as usize).min(values.len() - 1)];
    Some((at(0.025), at(0.975)))
}

/// A small, fixed-seed generator (SplitMix64): resampling needs spread, not secrecy, and the
/// same figures every time the same samples are summarised.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`); the modulo bias is below 2^-40 for the n used here.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(ms: &[u64]) -> Samples {
        ms.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn a_constant_ratio_has_a_point_interval() {
        let base = samples(&[100, 120, 140, 160, 180]);
        let a = samples(&[110, 132, 154, 176, 198]);
        let (lo, hi) = ratio_of_medians(&a, &base, 500).expect("interval");
        assert!(
            (lo - 1.1).abs() < 1e-9 && (hi - 1.1).abs() < 1e-9,
            "{lo} {hi}"
        );
    }

    #[test]
    fn the_interval_holds_the_ratio_and_widens_with_disagreeing_rounds() {
        let base: Vec<u64> = (0..60).map(|i| 150 + (i * 7) % 20).collect();
        let tight: Vec<u64> = base.iter().map(|b| b + 3).collect();
        let loose: Vec<u64> = base
            .iter()
            .enumerate()
            .map(|(i, b)| if i % 2 == 0 { b + 25 } else { b - 19 })
            .collect();
        let (base, tight, loose) = (samples(&base), samples(&tight), samples(&loose));
        let (tl, th) = ratio_of_medians(&tight, &base, RESAMPLES).expect("tight");
        let (ll, lh) = ratio_of_medians(&loose, &base, RESAMPLES).expect("loose");
        let point = tight.ratio_to(&base);
        assert!(tl <= point && point <= th, "{tl} {point} {th}");
        assert!(
            lh - ll > th - tl,
            "loose [{ll}, {lh}] not wider than tight [{tl}, {th}]"
        );
    }

    #[test]
    fn a_constant_difference_has_a_point_interval_in_milliseconds() {
        let base = samples(&[30, 34, 31, 40, 33]);
        let a = samples(&[32, 36, 33, 42, 35]);
        let (lo, hi) = difference_of_medians(&a, &base, 500).expect("interval");
        assert!(
            (lo - 2.0).abs() < 1e-9 && (hi - 2.0).abs() < 1e-9,
            "{lo} {hi}"
        );
        let (lo, hi) = difference_of_medians(&base, &a, 500).expect("interval");
        assert!(
            (lo + 2.0).abs() < 1e-9 && (hi + 2.0).abs() < 1e-9,
            "{lo} {hi}"
        );
    }

    #[test]
    fn too_few_rounds_give_no_interval() {
        assert_eq!(ratio_of_medians(&samples(&[1]), &samples(&[1]), 100), None);
        assert_eq!(
            ratio_of_medians(&samples(&[]), &samples(&[1, 2]), 100),
            None
        );
    }

    #[test]
    fn the_same_samples_give_the_same_interval() {
        let base = samples(&[100, 90, 130, 95, 170, 110]);
        let a = samples(&[104, 99, 120, 101, 190, 112]);
        assert_eq!(
            ratio_of_medians(&a, &base, 300),
            ratio_of_medians(&a, &base, 300)
        );
    }
}
