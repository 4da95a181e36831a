//! Whether one policy beat another over the repetitions: a two-sided
//! permutation test on the difference of the means, as Firecracker's A/B
//! tool judges (tools/ab_test.py: a change is real when p < 0.01 and the
//! mean moved by more than a share of the baseline's mean).
//!
//! Exact when the ways to split the pooled values into the two groups are
//! few ([`EXACT_UP_TO`]); else a Monte-Carlo estimate over [`RESAMPLES`]
//! random splits from a fixed seed, so the same records give the same
//! verdict. A difference is *significant* when p < [`ALPHA`] and the means
//! differ by more than [`NOISE`] of the other's mean. When it is not, the
//! repetitions a policy would need are estimated from the observed effect
//! and spread (a normal approximation at 80 % power), and never fewer than
//! the exact test needs to reach p < 0.01 at all (5 a side).

use serde::Serialize;

/// The p-value below which a difference counts.
pub const ALPHA: f64 = 0.01;
/// Means closer than this share of the other's mean are noise, however
/// small p is (as `run --compare`'s "about the same").
pub const NOISE: f64 = 0.05;
/// Enumerate every split up to this many.
pub const EXACT_UP_TO: u64 = 20_000;
/// Random splits otherwise.
pub const RESAMPLES: u32 = 10_000;
/// The fewest repetitions a side with which an exact test can reach
/// p < 0.01: 2 / C(10, 5) = 0.008.
pub const MIN_REPETITIONS: usize = 5;

/// The test of `a` against `b`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Test {
    /// Two-sided p-value of the difference of the means.
    pub p: f64,
    /// Whether p is exact (every split) or a Monte-Carlo estimate.
    pub exact: bool,
    /// (mean a - mean b) / |mean b|; 0 when mean b is 0.
    pub effect: f64,
    /// p < ALPHA and |effect| > NOISE.
    pub significant: bool,
    /// When not significant: the repetitions a side that would likely
    /// make it so (null: the effect is within the noise, no number would).
    pub repetitions_needed: Option<usize>,
}

impl Test {
    /// `a` against `b`; None with fewer than two values a side.
    pub fn of(a: &[f64], b: &[f64]) -> Option<Test> {
        if a.len() < 2 || b.len() < 2 {
            return None;
        }
        let (p, exact) = permutation_p(a, b);
        let (ma, mb) = (mean(a), mean(b));
        let effect = if mb != 0.0 { (ma - mb) / mb.abs() } else { 0.0 };
        let significant = p < ALPHA && effect.abs() > NOISE;
        let repetitions_needed = if significant || effect.abs() <= NOISE {
            None
        } else {
            Some(needed(a, b))
        };
        Some(Test {
            p,
            exact,
            effect,
            significant,
            repetitions_needed,
        })
    }

    /// In words: "p=0.008, +12.0 %" or "not significant (p=0.23, +3.1 %;
    /// ~9 repetitions would be needed)".
    pub fn describe(&self) -> String {
        let p = format!("p={}", fmt_p(self.p));
        let effect = format!("{:+.1} %", self.effect * 100.0);
        if self.significant {
            return format!("{p}, {effect}");
        }
        let why = match self.repetitions_needed {
            Some(n) => format!("~{n} repetitions a policy would be needed"),
            None => format!("within the {:.0} % noise", NOISE * 100.0),
        };
        format!("not significant ({p}, {effect}; {why})")
    }
}

fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn variance(v: &[f64]) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64
}

/// Repetitions a side for a two-sided test at ALPHA with 80 % power to see
/// the observed difference with the observed pooled spread.
fn needed(a: &[f64], b: &[f64]) -> usize {
    const Z_ALPHA: f64 = 2.576; // two-sided 0.01
    const Z_POWER: f64 = 0.842; // 80 %
    let d = (mean(a) - mean(b)).abs();
    let s2 = (variance(a) + variance(b)) / 2.0;
    let n = 2.0 * (Z_ALPHA + Z_POWER).powi(2) * s2 / (d * d);
    let n = if n.is_finite() {
        n.ceil() as usize
    } else {
        usize::MAX
    };
    n.clamp(MIN_REPETITIONS, 10_000)
}

/// C(n, k), saturating.
fn choose(n: u64, k: u64) -> u64 {
    let k = k.min(n - k);
    let mut c: u64 = 1;
    for i in 0..k {
        c = match c.checked_mul(n - i) {
            Some(x) => x / (i + 1),
            None => return u64::MAX,
        };
    }
    c
}

/// Two-sided p of |mean a - mean b| over the splits of the pooled values.
pub fn permutation_p(a: &[f64], b: &[f64]) -> (f64, bool) {
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let (n, k) = (pooled.len(), a.len());
    let total: f64 = pooled.iter().sum();
    let diff = |sum_a: f64| (sum_a / k as f64 - (total - sum_a) / (n - k) as f64).abs();
    let observed = diff(a.iter().sum());
    // Ties within rounding count as at least as extreme.
    let at_least = |d: f64| d >= observed - observed.abs() * 1e-9 - f64::EPSILON;
    if choose(n as u64, k as u64) <= EXACT_UP_TO {
        let (mut hits, mut all) = (0u64, 0u64);
        let mut idx: Vec<usize> = (0..k).collect();
        loop {
            all += 1;
            if at_least(diff(idx.iter().map(|&i| pooled[i]).sum())) {
                hits += 1;
            }
            // The next k-combination in lexicographic order.
            let Some(i) = (0..k).rev().find(|&i| idx[i] < n - k + i) else {
                break;
            };
            idx[i] += 1;
            for j in i + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
        }
        return (hits as f64 / all as f64, true);
    }
    let mut rng = SplitMix64(0x005e_ed0f_9ace);
    let mut shuffled = pooled.clone();
    let mut hits = 0u32;
    for _ in 0..RESAMPLES {
        // Partial Fisher-Yates: the first k are a uniform random subset.
        for i in 0..k {
            let j = i + (rng.next() % (n - i) as u64) as usize;
            shuffled.swap(i, j);
        }
        if at_least(diff(shuffled[..k].iter().sum())) {
            hits += 1;
        }
    }
    // (hits + 1) / (R + 1): the observed split is one of them.
    ((hits + 1) as f64 / (RESAMPLES + 1) as f64, false)
}

/// A small seeded generator (SplitMix64): the verdict must not depend on
/// a run's randomness.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_p_of_separated_groups_is_the_two_extreme_splits() {
        let a = [10.0, 11.0, 12.0, 13.0, 14.0];
        let b = [1.0, 2.0, 3.0, 4.0, 5.0];
        let (p, exact) = permutation_p(&a, &b);
        assert!(exact);
        // 2 of C(10,5) = 252 splits are as extreme.
        assert!((p - 2.0 / 252.0).abs() < 1e-12, "{p}");
        let t = Test::of(&a, &b).unwrap();
        assert!(t.significant && t.repetitions_needed.is_none(), "{t:?}");
        assert!(t.describe().starts_with("p=0.008, +"), "{}", t.describe());
    }

    #[test]
    fn four_a_side_can_never_reach_one_percent() {
        let t = Test::of(&[10.0, 11.0, 12.0, 13.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        // 2 / C(8,4) = 0.029.
        assert!((t.p - 2.0 / 70.0).abs() < 1e-12);
        assert!(!t.significant);
        assert_eq!(t.repetitions_needed, Some(MIN_REPETITIONS));
        assert!(
            t.describe().starts_with("not significant (p=0.029"),
            "{}",
            t.describe()
        );
    }

    #[test]
    fn overlapping_groups_are_not_significant_and_say_how_many_would_do() {
        let a = [100.0, 108.0, 96.0, 112.0, 104.0];
        let b = [95.0, 103.0, 91.0, 99.0, 97.0];
        let t = Test::of(&a, &b).unwrap();
        assert!(!t.significant && t.p > ALPHA, "{t:?}");
        let n = t.repetitions_needed.unwrap();
        assert!(n > 5 && n < 100, "{n}");
        assert!(
            t.describe().contains(&format!("~{n} repetitions")),
            "{}",
            t.describe()
        );
    }

    #[test]
    fn a_tiny_effect_is_noise_however_small_p_is() {
        let a: Vec<f64> = (0..10).map(|i| 101.0 + i as f64 * 0.01).collect();
        let b: Vec<f64> = (0..10).map(|i| 100.0 + i as f64 * 0.01).collect();
        let t = Test::of(&a, &b).unwrap();
        assert!(t.p < ALPHA, "{t:?}");
        assert!(!t.significant && t.repetitions_needed.is_none());
        assert!(
            t.describe().contains("within the 5 % noise"),
            "{}",
            t.describe()
        );
    }

    #[test]
    fn many_repetitions_use_a_seeded_monte_carlo() {
        let a: Vec<f64> = (0..12).map(|i| 200.0 + i as f64).collect();
        let b: Vec<f64> = (0..12).map(|i| 100.0 + i as f64).collect();
        let (p, exact) = permutation_p(&a, &b);
        assert!(!exact);
        assert_eq!(p, 1.0 / f64::from(RESAMPLES + 1));
        assert_eq!(
            permutation_p(&a, &b),
            (p, exact),
            "the same seed, the same p"
        );
        // Identical groups: nothing to tell apart.
        let (p, _) = permutation_p(&b, &b);
        assert!(p > 0.9, "{p}");
        assert!(Test::of(&[1.0], &[2.0, 3.0]).is_none());
    }
}
