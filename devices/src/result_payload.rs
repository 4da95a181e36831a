//! What the five values of a bench-guest result record mean, by kind
//! (guests/PROTOCOL.md): the workload summaries (SLEEP_DONE, PINGPONG_DONE,
//! BURST_DONE, SPINLOCK_DONE, BARRIER_DONE, SHOOTDOWN_DONE), latency summaries and histogram chunks, and
//! the name packed into ERROR records; plus the histogram bucket layout.
//! Pure functions over guest data: [`decode`] never panics and rejects
//! values the protocol does not allow, and the result port uses it to
//! validate every record before accepting it.

use crate::result_port::RecordKind;
use serde::Serialize;

/// Sub-buckets per power of two in the latency histograms (HdrHistogram's
/// two significant digits: a bucket is at most 1/128 of its values wide).
pub const HIST_SUB: u64 = 128;
/// log2 of [`HIST_SUB`].
const HIST_SUB_BITS: u64 = 7;
/// Values from 2^HIST_TOP_BIT ns (137 s) on share the last bucket.
const HIST_TOP_BIT: u64 = 37;
/// Buckets of a histogram: 128 exact ones, 128 per power of two up to
/// 2^37 ns, and one for everything above.
pub const HIST_BUCKETS: u16 = 3969;
/// (bucket, count) pairs per HISTOGRAM record.
pub const HIST_PAIRS: usize = 4;
/// Bits of a pair holding the count; the bucket sits above them.
pub const HIST_COUNT_BITS: u32 = 48;

/// What a LATENCY / HISTOGRAM record measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyMetric {
    /// `sleep`: wake TSC - programmed TSC.
    SleepWake = 1,
    /// `burst`: the same, once per period.
    BurstWake = 2,
    /// `spinlock`: time from the first attempt to holding the lock.
    LockWait = 3,
    /// `shootdown`: IPIs sent to every sibling until all acknowledged.
    Shootdown = 4,
    /// `server`: a request's intended arrival to the end of its service.
    ServerRequest = 8,
}

impl LatencyMetric {
    pub fn from_u64(v: u64) -> Option<LatencyMetric> {
        Some(match v {
            1 => LatencyMetric::SleepWake,
            2 => LatencyMetric::BurstWake,
            3 => LatencyMetric::LockWait,
            4 => LatencyMetric::Shootdown,
            8 => LatencyMetric::ServerRequest,
            _ => return None,
        })
    }
}

/// ERROR codes of the bench guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuestErrorCode {
    UnknownWorkload,
    BadParam,
    TooManyVcpus,
    ApTimeout,
    NoLapic,
    LockBroken,
    NoTscDeadline,
    /// A code this VMM does not know (kept).
    Other(u64),
}

impl GuestErrorCode {
    pub fn from_u64(v: u64) -> GuestErrorCode {
        match v {
            1 => GuestErrorCode::UnknownWorkload,
            2 => GuestErrorCode::BadParam,
            3 => GuestErrorCode::TooManyVcpus,
            4 => GuestErrorCode::ApTimeout,
            5 => GuestErrorCode::NoLapic,
            6 => GuestErrorCode::LockBroken,
            7 => GuestErrorCode::NoTscDeadline,
            other => GuestErrorCode::Other(other),
        }
    }
}

/// An ERROR record: the code, the name it concerns (the offending key,
/// workload, ...; at most 24 bytes) and a detail value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuestError {
    pub code: GuestErrorCode,
    pub name: String,
    pub detail: u64,
}

/// A LATENCY record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Latency {
    pub metric: LatencyMetric,
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// A HISTOGRAM record: some non-empty buckets of one metric's histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistogramChunk {
    pub metric: LatencyMetric,
    /// (bucket index, count), count > 0.
    pub buckets: Vec<(u16, u64)>,
}

/// The meaning of a record's values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "payload")]
pub enum Payload {
    /// WORK_SAMPLE, WORK_DONE, BOOT_TIMES, TEXT: read directly from the values.
    Plain,
    Error(GuestError),
    Latency(Latency),
    Histogram(HistogramChunk),
    SleepDone {
        wakes: u64,
        missed: u64,
        interval_ns: u64,
        ticks: u64,
    },
    PingpongDone {
        roundtrips: u64,
        ticks: u64,
        partner: u32,
        initiator: bool,
    },
    BurstDone {
        bursts: u64,
        missed: u64,
        ticks: u64,
        busy_ticks: u64,
        run_fraction_ppm: u64,
    },
    SpinlockDone {
        acquisitions: u64,
        ticks: u64,
        max_wait_ns: u64,
        cs_ns: u64,
    },
    /// `barrier`: rounds met, and the ticks spent spinning for siblings.
    BarrierDone {
        rounds: u64,
        ticks: u64,
        spin_ticks: u64,
        participants: u64,
    },
    /// `shootdown`: the initiator's round trips to `peer` targets, or a
    /// responder's acknowledgements (`peer` = the initiator's vCPU).
    ShootdownDone {
        count: u64,
        ticks: u64,
        peer: u32,
        initiator: bool,
    },
    /// `server`, from the dispatcher: requests served by the VM's workers,
    /// ticks from the start to the last one's end, requests offered (the
    /// arrivals) and dropped (a full queue).
    ServerDone {
        requests: u64,
        ticks: u64,
        offered: u64,
        dropped: u64,
    },
    /// The vCPU's steal time as the guest read it from its KVM steal-time
    /// area: over the vCPU's life and over the workload.
    Steal {
        steal_ns: u64,
        workload_steal_ns: u64,
        ticks: u64,
    },
}

/// The bucket of value `v` (ns): v < 128 -> v; v >= 2^37 -> the last
/// bucket; else with e = floor(log2 v), 128 * (e - 6) + the 7 bits below
/// the leading one.
pub fn bucket_of(v: u64) -> u16 {
    if v < HIST_SUB {
        return v as u16;
    }
    if v >> HIST_TOP_BIT != 0 {
        return HIST_BUCKETS - 1;
    }
    let e = 63 - v.leading_zeros() as u64;
    (HIST_SUB * (e - (HIST_SUB_BITS - 1)) + ((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1))) as u16
}

/// The values (inclusive) bucket `b` holds; None past the last bucket.
pub fn bucket_range(b: u16) -> Option<(u64, u64)> {
    if b >= HIST_BUCKETS {
        return None;
    }
    if b == HIST_BUCKETS - 1 {
        return Some((1 << HIST_TOP_BIT, u64::MAX));
    }
    let b = b as u64;
    if b < HIST_SUB {
        return Some((b, b));
    }
    let (e, m) = (b / HIST_SUB + (HIST_SUB_BITS - 1), b % HIST_SUB);
    let lo = (HIST_SUB + m) << (e - HIST_SUB_BITS);
    let width = 1u64 << (e - HIST_SUB_BITS);
    Some((lo, lo + (width - 1)))
}

/// The value at quantile `num / den` of a histogram (non-empty buckets in
/// increasing order): the top of the bucket holding that rank, never above
/// `max` (exact), as the guest reads its own percentiles. None when the
/// histogram is empty.
pub fn quantile(buckets: &[(u16, u64)], num: u64, den: u64, max: u64) -> Option<u64> {
    let total = buckets.iter().fold(0u64, |a, &(_, c)| a.saturating_add(c));
    if total == 0 || den == 0 {
        return None;
    }
    let rank = ((u128::from(total) * u128::from(num)).div_ceil(u128::from(den))).max(1);
    let mut seen = 0u128;
    for &(b, c) in buckets {
        seen += u128::from(c);
        if seen >= rank {
            let top = bucket_range(b).map_or(max, |(_, hi)| hi);
            return Some(top.min(max));
        }
    }
    Some(max)
}

/// The name packed little endian into `words` (24 bytes, NUL-padded);
/// bytes that are not printable ASCII become '?'.
pub fn packed_name(words: &[u64]) -> String {
    words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take_while(|&b| b != 0)
        .map(|b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

/// Why a record's values are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown latency metric {0}")]
    Metric(u64),
    #[error("percentiles out of order (p50 {p50} p99 {p99} max {max})")]
    Percentiles { p50: u64, p99: u64, max: u64 },
    #[error("reserved bits set in v0 {0:#x}")]
    ReservedBits(u64),
    #[error("{0} pairs (want 1..={HIST_PAIRS})")]
    Pairs(usize),
    #[error("unused pair {0} is not zero")]
    UnusedPair(usize),
    #[error("bucket {0} out of range")]
    Bucket(u16),
    #[error("pair {0} has a zero count")]
    ZeroCount(usize),
    #[error("partner {0} too big")]
    Partner(u64),
    #[error("role {0} (want 0 or 1)")]
    Role(u64),
    #[error("BARRIER_DONE: spin {spin} ticks exceed the run's {ticks} ticks")]
    Spin { spin: u64, ticks: u64 },
    #[error("SERVER_DONE: {requests} served + {dropped} dropped exceed the {offered} offered")]
    Server {
        requests: u64,
        dropped: u64,
        offered: u64,
    },
    #[error("STEAL: workload steal {workload} ns exceeds the total {total} ns")]
    Steal { workload: u64, total: u64 },
}

fn metric(v: u64) -> Result<LatencyMetric, DecodeError> {
    LatencyMetric::from_u64(v).ok_or(DecodeError::Metric(v))
}

/// Decode (and so validate) the values of a record of kind `kind`.
pub fn decode(kind: RecordKind, v: &[u64; 5]) -> Result<Payload, DecodeError> {
    Ok(match kind {
        RecordKind::WorkSample | RecordKind::WorkDone | RecordKind::BootTimes => Payload::Plain,
        RecordKind::Text => Payload::Plain,
        RecordKind::Error => Payload::Error(GuestError {
            code: GuestErrorCode::from_u64(v[0]),
            name: packed_name(&v[1..4]),
            detail: v[4],
        }),
        RecordKind::Latency => {
            let l = Latency {
                metric: metric(v[0])?,
                count: v[1],
                p50_ns: v[2],
                p99_ns: v[3],
                max_ns: v[4],
            };
            if !(l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns) {
                return Err(DecodeError::Percentiles {
                    p50: l.p50_ns,
                    p99: l.p99_ns,
                    max: l.max_ns,
                });
            }
            Payload::Latency(l)
        }
        RecordKind::Histogram => {
            let m = metric(v[0] & 0xffff)?;
            let n = ((v[0] >> 16) & 0xff) as usize;
            if v[0] >> 24 != 0 {
                return Err(DecodeError::ReservedBits(v[0]));
            }
            if n == 0 || n > HIST_PAIRS {
                return Err(DecodeError::Pairs(n));
            }
            let mask = (1u64 << HIST_COUNT_BITS) - 1;
            let mut buckets = Vec::with_capacity(n);
            for (i, &pair) in v[1..].iter().enumerate() {
                if i >= n {
                    if pair != 0 {
                        return Err(DecodeError::UnusedPair(i));
                    }
                    continue;
                }
                let (bucket, count) = ((pair >> HIST_COUNT_BITS) as u16, pair & mask);
                if bucket >= HIST_BUCKETS {
                    return Err(DecodeError::Bucket(bucket));
                }
                if count == 0 {
                    return Err(DecodeError::ZeroCount(i));
                }
                buckets.push((bucket, count));
            }
            Payload::Histogram(HistogramChunk { metric: m, buckets })
        }
        RecordKind::SleepDone => Payload::SleepDone {
            wakes: v[0],
            missed: v[1],
            interval_ns: v[2],
            ticks: v[3],
        },
        RecordKind::PingpongDone => {
            let partner = u32::try_from(v[3]).map_err(|_| DecodeError::Partner(v[3]))?;
            if v[4] > 1 {
                return Err(DecodeError::Role(v[4]));
            }
            Payload::PingpongDone {
                roundtrips: v[0],
                ticks: v[1],
                partner,
                initiator: v[4] == 0,
            }
        }
        RecordKind::BurstDone => Payload::BurstDone {
            bursts: v[0],
            missed: v[1],
            ticks: v[2],
            busy_ticks: v[3],
            run_fraction_ppm: v[4],
        },
        RecordKind::SpinlockDone => Payload::SpinlockDone {
            acquisitions: v[0],
            ticks: v[1],
            max_wait_ns: v[3],
            cs_ns: v[4],
        },
        RecordKind::BarrierDone => {
            if v[3] > v[1] {
                return Err(DecodeError::Spin {
                    spin: v[3],
                    ticks: v[1],
                });
            }
            Payload::BarrierDone {
                rounds: v[0],
                ticks: v[1],
                spin_ticks: v[3],
                participants: v[4],
            }
        }
        RecordKind::ShootdownDone => {
            let peer = u32::try_from(v[3]).map_err(|_| DecodeError::Partner(v[3]))?;
            if v[4] > 1 {
                return Err(DecodeError::Role(v[4]));
            }
            Payload::ShootdownDone {
                count: v[0],
                ticks: v[1],
                peer,
                initiator: v[4] == 0,
            }
        }
        RecordKind::ServerDone => {
            let (requests, offered, dropped) = (v[0], v[3], v[4]);
            if requests.checked_add(dropped).is_none_or(|n| n > offered) {
                return Err(DecodeError::Server {
                    requests,
                    dropped,
                    offered,
                });
            }
            Payload::ServerDone {
                requests,
                ticks: v[1],
                offered,
                dropped,
            }
        }
        RecordKind::Steal => {
            if v[1] > v[0] {
                return Err(DecodeError::Steal {
                    workload: v[1],
                    total: v[0],
                });
            }
            Payload::Steal {
                steal_ns: v[0],
                workload_steal_ns: v[1],
                ticks: v[2],
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range() {
        // Consecutive buckets touch; each value lands in the bucket whose
        // range holds it.
        let mut next = 0u64;
        for b in 0..HIST_BUCKETS {
            let (lo, hi) = bucket_range(b).unwrap();
            assert_eq!(lo, next, "bucket {b}");
            assert!(hi >= lo);
            assert_eq!(bucket_of(lo), b);
            assert_eq!(bucket_of(hi), b);
            next = hi.wrapping_add(1);
        }
        assert_eq!(next, 0, "the last bucket ends at u64::MAX");
        assert_eq!(bucket_range(HIST_BUCKETS), None);
        assert_eq!(bucket_of(127), 127);
        assert_eq!(bucket_of(128), 128);
        assert_eq!(bucket_of(255), 255);
        assert_eq!(bucket_of(256), 256);
        assert_eq!(bucket_of(257), 256);
        assert_eq!(bucket_range(256), Some((256, 257)));
        assert_eq!(bucket_of((1 << 37) - 1), HIST_BUCKETS - 2);
        assert_eq!(bucket_of(1 << 37), HIST_BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn buckets_have_two_significant_digits() {
        // Below the catch-all bucket, no bucket is wider than 1/128 of its
        // lowest value (HdrHistogram's two significant digits): a
        // percentile read as its bucket's top is within 0.8 % above.
        for b in HIST_SUB as u16..HIST_BUCKETS - 1 {
            let (lo, hi) = bucket_range(b).unwrap();
            assert!((hi - lo + 1) * HIST_SUB <= lo, "bucket {b}: {lo}..={hi}");
        }
        // 1 ms lands in a bucket 4 us wide, not one of 33 us (16 per power of two).
        let (lo, hi) = bucket_range(bucket_of(1_000_000)).unwrap();
        assert_eq!(hi - lo + 1, 4096);
    }

    #[test]
    fn quantiles_read_the_bucket_top_capped_by_the_max() {
        // 1000 values: 998 at 1000 ns, one at 50 us, one at 2 ms (the max).
        let h = vec![
            (bucket_of(1000), 998),
            (bucket_of(50_000), 1),
            (bucket_of(2_000_000), 1),
        ];
        let top = |v: u64| bucket_range(bucket_of(v)).unwrap().1;
        assert_eq!(quantile(&h, 50, 100, 2_000_000), Some(top(1000)));
        assert_eq!(quantile(&h, 99, 100, 2_000_000), Some(top(1000)));
        // Rank 999 is the 50 us value, rank 1000 the max.
        assert_eq!(quantile(&h, 999, 1000, 2_000_000), Some(top(50_000)));
        assert_eq!(quantile(&h, 1, 1, 2_000_000), Some(2_000_000));
        assert_eq!(quantile(&[], 999, 1000, 5), None);
    }

    #[test]
    fn error_names() {
        let mut w = [0u64; 3];
        for (i, b) in b"duration_ms".iter().enumerate() {
            w[i / 8] |= (*b as u64) << (8 * (i % 8));
        }
        let p = decode(RecordKind::Error, &[2, w[0], w[1], w[2], 7]).unwrap();
        assert_eq!(
            p,
            Payload::Error(GuestError {
                code: GuestErrorCode::BadParam,
                name: "duration_ms".into(),
                detail: 7
            })
        );
        assert_eq!(packed_name(&[0x0a41]), "A?");
        assert_eq!(packed_name(&[u64::MAX; 3]).len(), 24);
        assert_eq!(GuestErrorCode::from_u64(99), GuestErrorCode::Other(99));
    }

    #[test]
    fn latency_and_histogram() {
        let l = decode(RecordKind::Latency, &[1, 10, 5, 9, 12]).unwrap();
        assert!(matches!(l, Payload::Latency(Latency { count: 10, .. })));
        assert!(decode(RecordKind::Latency, &[1, 10, 9, 5, 12]).is_err());
        assert!(decode(RecordKind::Latency, &[5, 1, 1, 1, 1]).is_err());
        let pair = |b: u64, c: u64| (b << HIST_COUNT_BITS) | c;
        let h = decode(
            RecordKind::Histogram,
            &[2 | (2 << 16), pair(40, 3), pair(3968, 1), 0, 0],
        )
        .unwrap();
        assert_eq!(
            h,
            Payload::Histogram(HistogramChunk {
                metric: LatencyMetric::BurstWake,
                buckets: vec![(40, 3), (3968, 1)]
            })
        );
        // Too many pairs, bucket out of range, zero count, junk in an unused pair.
        assert!(decode(RecordKind::Histogram, &[1 | (5 << 16), 0, 0, 0, 0]).is_err());
        assert!(decode(
            RecordKind::Histogram,
            &[1 | (1 << 16), pair(3969, 1), 0, 0, 0]
        )
        .is_err());
        assert!(decode(RecordKind::Histogram, &[1 | (1 << 16), pair(3, 0), 0, 0, 0]).is_err());
        assert!(decode(RecordKind::Histogram, &[1 | (1 << 16), pair(3, 1), 1, 0, 0]).is_err());
        assert!(decode(RecordKind::Histogram, &[1 | (1 << 24), pair(3, 1), 0, 0, 0]).is_err());
    }

    #[test]
    fn server_done_adds_up() {
        assert_eq!(
            decode(RecordKind::ServerDone, &[98, 1000, 98, 100, 2]).unwrap(),
            Payload::ServerDone {
                requests: 98,
                ticks: 1000,
                offered: 100,
                dropped: 2
            }
        );
        // More served and dropped than arrived; an overflowing sum.
        assert!(decode(RecordKind::ServerDone, &[99, 1000, 0, 100, 2]).is_err());
        assert!(decode(RecordKind::ServerDone, &[u64::MAX, 1, 0, 5, 1]).is_err());
        assert_eq!(
            LatencyMetric::from_u64(8),
            Some(LatencyMetric::ServerRequest)
        );
    }

    #[test]
    fn workload_summaries() {
        assert_eq!(
            decode(RecordKind::PingpongDone, &[5, 100, 50, 3, 1]).unwrap(),
            Payload::PingpongDone {
                roundtrips: 5,
                ticks: 100,
                partner: 3,
                initiator: false
            }
        );
        assert!(decode(RecordKind::PingpongDone, &[5, 100, 50, 3, 2]).is_err());
        assert!(decode(RecordKind::PingpongDone, &[5, 100, 50, 1 << 40, 0]).is_err());
        assert!(matches!(
            decode(RecordKind::SpinlockDone, &[7, 70, 100, 9, 2000]).unwrap(),
            Payload::SpinlockDone {
                acquisitions: 7,
                max_wait_ns: 9,
                ..
            }
        ));
        assert_eq!(
            decode(RecordKind::Steal, &[900, 400, 70, 0, 0]).unwrap(),
            Payload::Steal {
                steal_ns: 900,
                workload_steal_ns: 400,
                ticks: 70
            }
        );
        assert!(decode(RecordKind::Steal, &[400, 900, 70, 0, 0]).is_err());
        assert_eq!(
            decode(RecordKind::BarrierDone, &[50, 1000, 5, 300, 3]).unwrap(),
            Payload::BarrierDone {
                rounds: 50,
                ticks: 1000,
                spin_ticks: 300,
                participants: 3,
            }
        );
        // more spinning than the run lasted
        assert!(decode(RecordKind::BarrierDone, &[50, 1000, 5, 1001, 3]).is_err());
        assert_eq!(
            decode(RecordKind::ShootdownDone, &[8, 80, 100, 2, 0]).unwrap(),
            Payload::ShootdownDone {
                count: 8,
                ticks: 80,
                peer: 2,
                initiator: true,
            }
        );
        assert!(decode(RecordKind::ShootdownDone, &[8, 80, 100, 2, 2]).is_err());
        assert!(decode(RecordKind::ShootdownDone, &[8, 80, 100, 1 << 40, 1]).is_err());
        assert!(matches!(
            decode(RecordKind::BurstDone, &[3, 1, 90, 30, 333_333]).unwrap(),
            Payload::BurstDone {
                run_fraction_ppm: 333_333,
                ..
            }
        ));
        assert!(matches!(
            decode(RecordKind::SleepDone, &[3, 1, 1000, 90, 0]).unwrap(),
            Payload::SleepDone { wakes: 3, .. }
        ));
        assert_eq!(
            decode(RecordKind::WorkDone, &[1, 2, 3, 4, 5]).unwrap(),
            Payload::Plain
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any values of any kind decode or are rejected, never panic; an
        /// accepted histogram only names real buckets.
        #[test]
        fn garbage_never_panics(kind in 1u16..=11, v in any::<[u64; 5]>()) {
            let kind = RecordKind::from_u16(kind).unwrap();
            if let Ok(Payload::Histogram(h)) = decode(kind, &v) {
                prop_assert!(!h.buckets.is_empty() && h.buckets.len() <= HIST_PAIRS);
                for (b, c) in h.buckets {
                    prop_assert!(bucket_range(b).is_some() && c > 0);
                }
            }
        }

        /// Every value lands in the bucket whose range holds it.
        #[test]
        fn bucket_holds_value(v in any::<u64>()) {
            let (lo, hi) = bucket_range(bucket_of(v)).unwrap();
            prop_assert!(lo <= v && v <= hi);
        }
    }
}
