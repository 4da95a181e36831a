//! Random distributions of burst and sleep lengths, and the simulator's
//! random stream.
//!
//! The simulator owns one [`SimRng`] (ChaCha8 seeded from the workload
//! seed) and draws from it in event order, so the same seed gives the same
//! run bit for bit on every platform.

use crate::Nanos;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// The simulator's random number generator.
pub type SimRng = rand_chacha::ChaCha8Rng;

/// A ChaCha8 stream seeded from `seed`.
pub fn rng_from_seed(seed: u64) -> SimRng {
    SimRng::seed_from_u64(seed)
}

/// A length distribution in microseconds. TOML form:
/// `{ dist = "fixed", us = 40 }`, `{ dist = "uniform", min_us = 30, max_us = 45 }`,
/// `{ dist = "exponential", mean_us = 70 }` (optionally `min_us` / `max_us`
/// to clamp the exponential).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Dist {
    /// Always `us`.
    Fixed {
        /// Length in microseconds.
        us: f64,
    },
    /// Uniform in `[min_us, max_us]`.
    Uniform {
        /// Lower bound (us).
        min_us: f64,
        /// Upper bound (us).
        max_us: f64,
    },
    /// Exponential with mean `mean_us`, clamped to `[min_us, max_us]`.
    Exponential {
        /// Mean (us) before clamping.
        mean_us: f64,
        /// Lower clamp (us), default 0.
        #[serde(default)]
        min_us: f64,
        /// Upper clamp (us), default unbounded.
        #[serde(default)]
        max_us: Option<f64>,
    },
}

impl Dist {
    /// `Fixed { us }`.
    pub fn fixed(us: f64) -> Dist {
        Dist::Fixed { us }
    }
    /// `Uniform { min_us, max_us }`.
    pub fn uniform(min_us: f64, max_us: f64) -> Dist {
        Dist::Uniform { min_us, max_us }
    }
    /// Unclamped exponential with the given mean.
    pub fn exponential(mean_us: f64) -> Dist {
        Dist::Exponential {
            mean_us,
            min_us: 0.0,
            max_us: None,
        }
    }

    /// Whether every sample is 0 (a zero sleep means "never sleeps").
    pub fn is_zero(&self) -> bool {
        match *self {
            Dist::Fixed { us } => us == 0.0,
            Dist::Uniform { min_us, max_us } => min_us == 0.0 && max_us == 0.0,
            Dist::Exponential {
                mean_us, max_us, ..
            } => mean_us == 0.0 || max_us == Some(0.0),
        }
    }

    /// Mean in microseconds (ignoring exponential clamping).
    pub fn mean_us(&self) -> f64 {
        match *self {
            Dist::Fixed { us } => us,
            Dist::Uniform { min_us, max_us } => (min_us + max_us) / 2.0,
            Dist::Exponential { mean_us, .. } => mean_us,
        }
    }

    /// Check that the parameters are finite, non-negative and ordered.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        match *self {
            Dist::Fixed { us } if ok(us) => Ok(()),
            Dist::Uniform { min_us, max_us } if ok(min_us) && ok(max_us) && min_us <= max_us => {
                Ok(())
            }
            Dist::Exponential {
                mean_us,
                min_us,
                max_us,
            } if ok(mean_us) && ok(min_us) && max_us.is_none_or(|m| ok(m) && m >= min_us) => Ok(()),
            _ => Err(format!("bad distribution parameters {self:?}")),
        }
    }

    /// Draw one length in nanoseconds.
    pub fn sample(&self, rng: &mut SimRng) -> Nanos {
        let us = match *self {
            Dist::Fixed { us } => us,
            Dist::Uniform { min_us, max_us } => {
                if max_us > min_us {
                    min_us + (max_us - min_us) * rng.random::<f64>()
                } else {
                    min_us
                }
            }
            Dist::Exponential {
                mean_us,
                min_us,
                max_us,
            } => {
                // Inverse CDF; 1 - u is in (0, 1] so ln never sees 0.
                let u: f64 = rng.random::<f64>();
                let v = -mean_us * (1.0 - u).ln();
                v.max(min_us).min(max_us.unwrap_or(f64::INFINITY))
            }
        };
        (us * 1000.0).round() as Nanos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_deterministic_and_in_range() {
        let mut a = rng_from_seed(7);
        let mut b = rng_from_seed(7);
        let d = Dist::uniform(30.0, 45.0);
        for _ in 0..1000 {
            let x = d.sample(&mut a);
            assert_eq!(x, d.sample(&mut b));
            assert!((30_000..=45_000).contains(&x));
        }
        let e = Dist::exponential(100.0);
        let n = 20_000;
        let mean = (0..n).map(|_| e.sample(&mut a) as f64).sum::<f64>() / n as f64;
        assert!((90_000.0..110_000.0).contains(&mean), "mean {mean}");
        assert_eq!(Dist::fixed(2.5).sample(&mut a), 2500);
    }

    #[test]
    fn validation() {
        assert!(Dist::uniform(5.0, 1.0).validate().is_err());
        assert!(Dist::fixed(-1.0).validate().is_err());
        assert!(Dist::exponential(10.0).validate().is_ok());
    }
}
