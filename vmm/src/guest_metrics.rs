//! Per-vCPU guest metrics of a VM, folded from its result records
//! (guests/PROTOCOL.md; payloads decoded by `devices::result_payload`):
//! units/s (`cpu`), wake latency (`sleep`, `burst`), round trips/s
//! (`pingpong`), acquisitions/s and lock wait (`spinlock`), run fraction
//! (`burst`), rounds/s and spin share (`barrier`), round trips/s and their
//! latency (`shootdown`), and the guest's ERROR records. Rates are recomputed from the
//! guest's counts and TSC ticks with the VM's TSC frequency, as units/s is;
//! the guest's own rate fields are not trusted. Pure functions: the records
//! are the only input.

use devices::result_payload::{
    bucket_range, decode, quantile, GuestError, Latency, LatencyMetric, Payload,
};
use devices::{RecordKind, ResultRecord};
use serde::Serialize;
use std::collections::BTreeMap;

/// A latency distribution: the guest's summary plus the histogram it sent.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Read from the histogram as the guest reads its own percentiles (the
    /// LATENCY record has no room for it); the max when no histogram came.
    pub p999_ns: u64,
    pub max_ns: u64,
    /// Non-empty buckets in increasing order.
    pub histogram: Vec<HistogramBucket>,
    /// Sum of the histogram's counts (equals `count` when nothing was lost).
    pub histogram_count: u64,
}

/// One histogram bucket: values `lo_ns..=hi_ns`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct HistogramBucket {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SleepMetrics {
    pub wakes: u64,
    /// Periods skipped because a wake came after the next one was due.
    pub missed: u64,
    pub interval_ns: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PingpongMetrics {
    pub roundtrips: u64,
    pub partner: u32,
    pub initiator: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BurstMetrics {
    pub bursts: u64,
    pub missed: u64,
    /// Work done (bursts x run_us) over the time taken: the CPU share the
    /// vCPU achieved, 0..1 (run_us / period_us when it kept up).
    pub run_fraction: f64,
    /// Wall time from wake to the end of each burst, over the time taken.
    pub busy_fraction: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake_latency_ns: Option<LatencySummary>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SpinlockMetrics {
    pub acquisitions: u64,
    pub max_wait_ns: u64,
    pub cs_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ns: Option<LatencySummary>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BarrierMetrics {
    pub rounds: u64,
    pub participants: u64,
    /// Time spent spinning at the barrier over the vCPU's run, 0..1.
    pub spin_share: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ShootdownMetrics {
    /// The initiator's round trips, or a responder's acknowledgements.
    pub count: u64,
    /// The initiator: its targets; a responder: the initiator's vCPU.
    pub peer: u32,
    pub initiator: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
}

/// `server` (the dispatcher's record): the whole VM's requests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerMetrics {
    pub requests: u64,
    /// Arrivals in the run (served + dropped).
    pub offered: u64,
    /// Arrivals refused by a full worker queue.
    pub dropped: u64,
    /// Intended arrival to end of service, over every worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_latency_ns: Option<LatencySummary>,
}

/// The vCPU's steal time as its guest read it (KVM's steal-time area).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StealMetrics {
    /// Over the vCPU's life, as last published (at its latest dispatch).
    pub steal_ns: u64,
    /// Over its workload.
    pub workload_steal_ns: u64,
}

/// What one vCPU's workload produced (only the fields it produced are set).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct VcpuMetrics {
    pub vcpu: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep_latency_ns: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep: Option<SleepMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roundtrips_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pingpong: Option<PingpongMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquisitions_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spinlock: Option<SpinlockMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<BurstMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier: Option<BarrierMetrics>,
    /// The shootdown initiator's round trips per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shootdowns_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shootdown: Option<ShootdownMetrics>,
    pub requests_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steal: Option<StealMetrics>,
}

/// An ERROR record and the vCPU that sent it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GuestErrorEntry {
    pub vcpu: u32,
    #[serde(flatten)]
    pub error: GuestError,
}

/// `count` events in `ticks` TSC ticks, per second.
pub fn rate(count: u64, ticks: u64, tsc_khz: u32) -> Option<f64> {
    devices::result_port::units_per_second(count, ticks, tsc_khz as u64)
}

#[derive(Default)]
struct Folding {
    m: VcpuMetrics,
    work_done: bool,
    latency: BTreeMap<u16, Latency>,
    histogram: BTreeMap<u16, BTreeMap<u16, u64>>,
}

fn summary(l: Option<&Latency>, hist: Option<&BTreeMap<u16, u64>>) -> Option<LatencySummary> {
    let l = l?;
    let pairs: Vec<(u16, u64)> = hist.into_iter().flatten().map(|(&b, &c)| (b, c)).collect();
    let p999_ns = quantile(&pairs, 999, 1000, l.max_ns)
        .unwrap_or(l.max_ns)
        .max(l.p99_ns);
    let histogram: Vec<HistogramBucket> = hist
        .into_iter()
        .flatten()
        .filter_map(|(&b, &count)| {
            bucket_range(b).map(|(lo_ns, hi_ns)| HistogramBucket {
                lo_ns,
                hi_ns,
                count,
            })
        })
        .collect();
    let histogram_count = histogram
        .iter()
        .fold(0u64, |a, b| a.saturating_add(b.count));
    Some(LatencySummary {
        count: l.count,
        p50_ns: l.p50_ns,
        p99_ns: l.p99_ns,
        p999_ns,
        max_ns: l.max_ns,
        histogram,
        histogram_count,
    })
}

/// Fold `(vcpu, record)` pairs (in arrival order) into per-vCPU metrics,
/// sorted by vCPU. `vcpu` is the vCPU that wrote the record.
pub fn vcpu_metrics<'a>(
    records: impl IntoIterator<Item = (u32, &'a ResultRecord)>,
    tsc_khz: u32,
) -> Vec<VcpuMetrics> {
    let mut fold = MetricsFold::new(tsc_khz);
    for (vcpu, r) in records {
        fold.add(vcpu, r);
    }
    fold.metrics()
}

/// Per-vCPU metrics folded one record at a time, so a VM's results need
/// not keep every record to report them (a run of hours sends hundreds
/// of thousands); what it holds grows with the vCPUs and the latency
/// histograms' buckets, not with the run's length.
#[derive(Default)]
pub struct MetricsFold {
    tsc_khz: u32,
    per: BTreeMap<u32, Folding>,
}

impl MetricsFold {
    pub fn new(tsc_khz: u32) -> MetricsFold {
        MetricsFold {
            tsc_khz,
            per: BTreeMap::new(),
        }
    }

    /// Fold in one record `vcpu` wrote; an ERROR record's error is
    /// returned (the caller keeps the guest's errors: one decode each).
    pub fn add(&mut self, vcpu: u32, r: &ResultRecord) -> Option<GuestErrorEntry> {
        let tsc_khz = self.tsc_khz;
        let Ok(payload) = decode(r.kind, &r.values) else {
            return None;
        };
        let f = self.per.entry(vcpu).or_insert_with(|| Folding {
            m: VcpuMetrics {
                vcpu,
                ..Default::default()
            },
            ..Default::default()
        });
        let v = &r.values;
        match (r.kind, payload) {
            (RecordKind::WorkDone, _) => {
                f.m.units_per_s = rate(v[0], v[1], tsc_khz);
                f.work_done = true;
            }
            (RecordKind::WorkSample, _) if !f.work_done => {
                f.m.units_per_s = rate(v[2], v[3], tsc_khz);
            }
            (_, Payload::Latency(l)) => {
                f.latency.insert(l.metric as u16, l);
            }
            (_, Payload::Histogram(h)) => {
                let buckets = f.histogram.entry(h.metric as u16).or_default();
                for (b, c) in h.buckets {
                    let e = buckets.entry(b).or_default();
                    *e = e.saturating_add(c);
                }
            }
            (
                _,
                Payload::SleepDone {
                    wakes,
                    missed,
                    interval_ns,
                    ..
                },
            ) => {
                f.m.sleep = Some(SleepMetrics {
                    wakes,
                    missed,
                    interval_ns,
                });
            }
            (
                _,
                Payload::PingpongDone {
                    roundtrips,
                    ticks,
                    partner,
                    initiator,
                },
            ) => {
                f.m.roundtrips_per_s = rate(roundtrips, ticks, tsc_khz);
                f.m.pingpong = Some(PingpongMetrics {
                    roundtrips,
                    partner,
                    initiator,
                });
            }
            (
                _,
                Payload::BurstDone {
                    bursts,
                    missed,
                    ticks,
                    busy_ticks,
                    run_fraction_ppm,
                },
            ) => {
                f.m.burst = Some(BurstMetrics {
                    bursts,
                    missed,
                    run_fraction: run_fraction_ppm as f64 / 1e6,
                    busy_fraction: (ticks > 0).then(|| busy_ticks as f64 / ticks as f64),
                    wake_latency_ns: None,
                });
            }
            (
                _,
                Payload::SpinlockDone {
                    acquisitions,
                    ticks,
                    max_wait_ns,
                    cs_ns,
                },
            ) => {
                f.m.acquisitions_per_s = rate(acquisitions, ticks, tsc_khz);
                f.m.spinlock = Some(SpinlockMetrics {
                    acquisitions,
                    max_wait_ns,
                    cs_ns,
                    wait_ns: None,
                });
            }
            (
                _,
                Payload::BarrierDone {
                    rounds,
                    ticks,
                    spin_ticks,
                    participants,
                },
            ) => {
                f.m.rounds_per_s = rate(rounds, ticks, tsc_khz);
                f.m.barrier = Some(BarrierMetrics {
                    rounds,
                    participants,
                    spin_share: (ticks > 0).then(|| spin_ticks as f64 / ticks as f64),
                });
            }
            (
                _,
                Payload::ShootdownDone {
                    count,
                    ticks,
                    peer,
                    initiator,
                },
            ) => {
                if initiator {
                    f.m.shootdowns_per_s = rate(count, ticks, tsc_khz);
                }
                f.m.shootdown = Some(ShootdownMetrics {
                    count,
                    peer,
                    initiator,
                    latency_ns: None,
                });
            }
            (
                _,
                Payload::ServerDone {
                    requests,
                    ticks,
                    offered,
                    dropped,
                },
            ) => {
                f.m.requests_per_s = rate(requests, ticks, tsc_khz);
                f.m.server = Some(ServerMetrics {
                    requests,
                    offered,
                    dropped,
                    request_latency_ns: None,
                });
            }
            (
                _,
                Payload::Steal {
                    steal_ns,
                    workload_steal_ns,
                    ..
                },
            ) => {
                f.m.steal = Some(StealMetrics {
                    steal_ns,
                    workload_steal_ns,
                });
            }
            (_, Payload::Error(error)) => return Some(GuestErrorEntry { vcpu, error }),
            _ => {}
        }
        None
    }

    /// The metrics of the records folded so far, sorted by vCPU.
    pub fn metrics(&self) -> Vec<VcpuMetrics> {
        self.per
            .values()
            .map(|f| {
                let mut m = f.m.clone();
                let get = |k: LatencyMetric| {
                    summary(f.latency.get(&(k as u16)), f.histogram.get(&(k as u16)))
                };
                m.sleep_latency_ns = get(LatencyMetric::SleepWake);
                let burst_wake = get(LatencyMetric::BurstWake);
                let lock_wait = get(LatencyMetric::LockWait);
                if let Some(b) = m.burst.as_mut() {
                    b.wake_latency_ns = burst_wake;
                }
                if let Some(s) = m.spinlock.as_mut() {
                    s.wait_ns = lock_wait;
                }
                let shootdown = get(LatencyMetric::Shootdown);
                if let Some(s) = m.shootdown.as_mut() {
                    s.latency_ns = shootdown;
                }
                let request = get(LatencyMetric::ServerRequest);
                if let Some(s) = m.server.as_mut() {
                    s.request_latency_ns = request;
                }
                m
            })
            .filter(|m| {
                *m != VcpuMetrics {
                    vcpu: m.vcpu,
                    ..Default::default()
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devices::result_payload::{bucket_of, GuestErrorCode, HIST_COUNT_BITS};

    fn rec(kind: RecordKind, values: [u64; 5]) -> ResultRecord {
        ResultRecord {
            kind,
            vcpu: 0,
            seq: 0,
            tsc: 0,
            values,
            text: None,
        }
    }

    fn pair(ns: u64, count: u64) -> u64 {
        ((bucket_of(ns) as u64) << HIST_COUNT_BITS) | count
    }

    #[test]
    fn folds_each_workload() {
        let khz = 1000; // 1 tick = 1 us
        let recs = [
            (0, rec(RecordKind::WorkSample, [5, 100, 5, 100, 0])),
            (0, rec(RecordKind::WorkDone, [20, 1000, 0, 0, 0])),
            (0, rec(RecordKind::WorkSample, [1, 1, 1, 1, 0])),
            (1, rec(RecordKind::SleepDone, [3, 1, 1_000_000, 4000, 0])),
            (1, rec(RecordKind::Latency, [1, 3, 2000, 9000, 9000])),
            (
                1,
                rec(
                    RecordKind::Histogram,
                    [1 | (2 << 16), pair(2000, 2), pair(9000, 1), 0, 0],
                ),
            ),
            (2, rec(RecordKind::PingpongDone, [50, 500_000, 100, 3, 0])),
            (
                3,
                rec(RecordKind::SpinlockDone, [200, 2_000_000, 100, 77, 2000]),
            ),
            (3, rec(RecordKind::Latency, [3, 200, 10, 50, 77])),
            (
                3,
                rec(
                    RecordKind::Histogram,
                    [3 | (1 << 16), pair(10, 150), 0, 0, 0],
                ),
            ),
            (
                3,
                rec(
                    RecordKind::Histogram,
                    [3 | (1 << 16), pair(77, 50), 0, 0, 0],
                ),
            ),
            (
                4,
                rec(RecordKind::BurstDone, [10, 2, 10_000, 4000, 300_000]),
            ),
            (4, rec(RecordKind::Latency, [2, 10, 5, 6, 7])),
            (5, rec(RecordKind::Text, [0, 0, 0, 0, 0])),
            (
                6,
                rec(RecordKind::ServerDone, [900, 1_000_000, 900, 1000, 100]),
            ),
            (6, rec(RecordKind::Latency, [8, 900, 40, 90, 95])),
            (
                6,
                rec(
                    RecordKind::Histogram,
                    [8 | (2 << 16), pair(40, 899), pair(95, 1), 0, 0],
                ),
            ),
        ];
        let m = vcpu_metrics(recs.iter().map(|(v, r)| (*v, r)), khz);
        assert_eq!(
            m.iter().map(|x| x.vcpu).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 6]
        );
        // WORK_DONE wins over a later sample.
        assert_eq!(m[0].units_per_s, Some(20_000.0));
        let s = m[1].sleep_latency_ns.as_ref().unwrap();
        assert_eq!(
            (s.count, s.p50_ns, s.p99_ns, s.max_ns),
            (3, 2000, 9000, 9000)
        );
        assert_eq!(s.histogram_count, 3);
        // p99.9 is read from the histogram: rank 3 of 3, the 9 us bucket's
        // top capped by the max.
        assert_eq!(s.p999_ns, 9000);
        assert_eq!(s.histogram.len(), 2);
        assert!(s.histogram[0].lo_ns <= 2000 && 2000 <= s.histogram[0].hi_ns);
        assert_eq!(m[1].sleep.as_ref().unwrap().missed, 1);
        assert_eq!(m[2].roundtrips_per_s, Some(100.0));
        assert_eq!(m[2].pingpong.as_ref().unwrap().partner, 3);
        assert_eq!(m[3].acquisitions_per_s, Some(100.0));
        let lock = m[3].spinlock.as_ref().unwrap();
        assert_eq!(lock.max_wait_ns, 77);
        assert_eq!(lock.wait_ns.as_ref().unwrap().histogram_count, 200);
        let b = m[4].burst.as_ref().unwrap();
        assert_eq!(b.run_fraction, 0.3);
        assert_eq!(b.busy_fraction, Some(0.4));
        let w = b.wake_latency_ns.as_ref().unwrap();
        assert_eq!((w.max_ns, w.histogram_count), (7, 0));
        // No histogram: p99.9 falls back to the max, an upper bound.
        assert_eq!(w.p999_ns, 7);
        // server: 900 requests in 1 s; the request latency folded in.
        assert_eq!(m[5].requests_per_s, Some(900.0));
        let srv = m[5].server.as_ref().unwrap();
        assert_eq!((srv.requests, srv.offered, srv.dropped), (900, 1000, 100));
        let l = srv.request_latency_ns.as_ref().unwrap();
        assert_eq!(
            (l.count, l.p99_ns, l.p999_ns, l.histogram_count),
            (900, 90, 95, 900)
        );
    }

    #[test]
    fn errors_and_invalid_payloads() {
        let mut key = 0u64;
        for (i, b) in b"gap_ns".iter().enumerate() {
            key |= (*b as u64) << (8 * i);
        }
        let recs = [
            (0, rec(RecordKind::Error, [2, key, 0, 0, 0])),
            // Out-of-order percentiles: ignored (the port rejects these anyway).
            (0, rec(RecordKind::Latency, [1, 3, 9, 2, 1])),
        ];
        let mut fold = MetricsFold::new(1000);
        let e: Vec<_> = recs.iter().filter_map(|(v, r)| fold.add(*v, r)).collect();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].vcpu, e[0].error.code), (0, GuestErrorCode::BadParam));
        assert_eq!(e[0].error.name, "gap_ns");
        assert!(fold.metrics().is_empty());
        assert!(vcpu_metrics(recs.iter().map(|(v, r)| (*v, r)), 1000).is_empty());
    }
}
