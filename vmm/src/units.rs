//! How quantities are printed for people: units that scale (2.23 ms, not
//! 2228.2 us; 415k/s, not 415234.7/s) and never more digits than the
//! measurement has.
//!
//! Latencies come from log-linear histograms (the guest's: 128 buckets per
//! power of two, `devices::result_payload::HIST_SUB`; the scheduler's:
//! 8, `vcpu_sched::stats`), so a p99 is known to one bucket: under 1 % or
//! about 12 % of its value. [`latency`] rounds to the power of ten at or below
//! the bucket's width (8388608 ns, in the guest's 65 us wide bucket,
//! prints as 8.39 ms; in the scheduler's 1 ms wide one as 8 ms), so a table never shows a digit the histogram cannot tell.
//! Other figures get three significant digits.

/// Buckets per power of two of the bench guest's latency histograms.
pub const GUEST_SUB_BUCKETS: u64 = devices::result_payload::HIST_SUB;
/// Buckets per power of two of `vcpu_sched`'s latency histograms.
pub const SCHED_SUB_BUCKETS: u64 = 8;

/// The width of the histogram bucket holding `ns`, for a histogram with
/// `sub` buckets per power of two (exact below `sub`).
pub fn bucket_width(ns: f64, sub: u64) -> f64 {
    if ns < sub as f64 {
        return 1.0;
    }
    2f64.powf(ns.log2().floor()) / sub as f64
}

/// `ns` rounded to the power of ten at or below `resolution_ns`, in the
/// largest unit (ns, us, ms, s) that keeps it at least 1.
pub fn duration(ns: f64, resolution_ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let step = 10f64.powf(resolution_ns.max(1.0).log10().floor());
    let v = (ns / step).round() * step;
    let (div, unit): (f64, &str) = if v.abs() >= 1e9 {
        (1e9, "s")
    } else if v.abs() >= 1e6 {
        (1e6, "ms")
    } else if v.abs() >= 1e3 {
        (1e3, "us")
    } else {
        (1.0, "ns")
    };
    let decimals = (div.log10() - step.log10()).max(0.0).round() as usize;
    format!("{:.*} {unit}", decimals, v / div)
}

/// A latency read from a histogram with `sub` buckets per power of two:
/// no finer than its bucket.
pub fn latency(ns: f64, sub: u64) -> String {
    duration(ns, bucket_width(ns, sub))
}

/// A duration measured exactly: three significant digits.
pub fn duration3(ns: f64) -> String {
    duration(ns, ns.abs() / 100.0)
}

/// A rate or count: three significant digits, k/M/G above ten thousand.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    let (div, suffix) = if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / div;
    let digits = if x.abs() >= 100.0 || (div == 1.0 && x == x.trunc()) {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_scale_and_keep_three_digits() {
        assert_eq!(duration3(2_228_200.0), "2.23 ms");
        assert_eq!(duration3(512.0), "512 ns");
        assert_eq!(duration3(1_500.0), "1.50 us");
        assert_eq!(duration3(3.2e9), "3.20 s");
        assert_eq!(duration3(f64::NAN), "-");
    }

    #[test]
    fn latencies_are_no_finer_than_their_bucket() {
        // 2^23 ns sits in a guest bucket 2^16 ns (65 us) wide: 10 us steps.
        assert_eq!(latency(8_388_608.0, GUEST_SUB_BUCKETS), "8.39 ms");
        // 51.2 us in a 256 ns bucket: 0.1 us steps.
        assert_eq!(latency(51_200.0, GUEST_SUB_BUCKETS), "51.2 us");
        // The scheduler's buckets are 16 times as wide.
        assert_eq!(latency(51_200.0, SCHED_SUB_BUCKETS), "51 us");
        assert_eq!(latency(2_228_200.0, SCHED_SUB_BUCKETS), "2.2 ms");
        // Exact below the first power of two split.
        assert_eq!(latency(7.0, GUEST_SUB_BUCKETS), "7 ns");
    }

    #[test]
    fn numbers_scale() {
        assert_eq!(number(415_234.7), "415k");
        assert_eq!(number(2.5e6), "2.50M");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.291), "0.29");
    }
}
