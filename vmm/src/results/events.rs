//! The published form of a VM's results: the lines of a run's
//! `<vm>.results.jsonl` (`pacer-vm-events`) and a VM's entry in the
//! `pacer-run` document (`pacer run --json`): a VM's results as one object per vCPU
//! (`vcpus[]`: what its guest workload measured, its scheduling, its
//! exits), its records with named values, every time in integer ns.
//!
//! The `pacer-run` document itself (its entries, one per policy run, and
//! a `--compare`'s verdicts) is the `pacer` tool's
//! (`pacer::documents::run`), made of the [`VmDoc`]s here.

use super::{MarkerEntry, RecordEntry, VcpuWork, VmResult};
use crate::documents::{ms_to_ns, nonempty, nonzero, Header, VM_EVENTS};
use crate::guest_metrics::{LatencySummary, VcpuMetrics};
use devices::result_payload::{bucket_range, decode, Payload};
use devices::RecordKind;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use vcpu_engine::stats::VcpuSchedStats;
use vcpu_engine::vcpu::VcpuStats;

/// A latency distribution the guest measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyDoc {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Read from the histogram (HdrHistogram-style, 2 significant digits).
    pub p999_ns: u64,
    pub max_ns: u64,
    /// The non-empty buckets of the guest's histogram, in order.
    pub histogram: Vec<BucketDoc>,
    /// Their counts added up (the `count` when nothing was lost).
    pub histogram_count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BucketDoc {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

fn latency(l: &LatencySummary) -> LatencyDoc {
    LatencyDoc {
        count: l.count,
        p50_ns: l.p50_ns,
        p99_ns: l.p99_ns,
        p999_ns: l.p999_ns,
        max_ns: l.max_ns,
        histogram: l
            .histogram
            .iter()
            .map(|b| BucketDoc {
                lo_ns: b.lo_ns,
                hi_ns: b.hi_ns,
                count: b.count,
            })
            .collect(),
        histogram_count: l.histogram_count,
    }
}

/// `cpu`: work units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuDoc {
    pub units: Option<u64>,
    pub units_per_s: Option<f64>,
    /// The guest's own time for them (TSC ticks over its frequency).
    pub duration_ns: Option<u64>,
    /// False: the workload did not finish (the last sample's totals).
    pub done: bool,
}

/// `sleep`: timer wake-ups and how late they came.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SleepDoc {
    pub wakeups: u64,
    pub missed: u64,
    pub interval_ns: u64,
    pub wake_latency: Option<LatencyDoc>,
}

/// `pingpong`: IPI round trips with a partner vCPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingpongDoc {
    pub roundtrips: u64,
    pub roundtrips_per_s: Option<f64>,
    pub partner_vcpu: u32,
    pub initiator: bool,
}

/// `burst`: a bursty waker's share and wake latency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BurstDoc {
    pub bursts: u64,
    pub missed: u64,
    /// Work done over the time taken: the CPU share it got, 0..1.
    pub run_fraction: f64,
    /// Wake to end of burst over the time taken, 0..1.
    pub busy_fraction: Option<f64>,
    pub wake_latency: Option<LatencyDoc>,
}

/// `spinlock`: acquisitions of a contended lock and the wait for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpinlockDoc {
    pub acquisitions: u64,
    pub acquisitions_per_s: Option<f64>,
    pub max_wait_ns: u64,
    pub cs_ns: u64,
    pub lock_wait: Option<LatencyDoc>,
}

/// `barrier`: rounds of a spin barrier the VM's `barrier` vCPUs meet at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarrierDoc {
    pub rounds: u64,
    pub rounds_per_s: Option<f64>,
    pub participants: u64,
    /// Time spent spinning at the barrier over the vCPU's run, 0..1.
    pub spin_share: Option<f64>,
}

/// `shootdown`: the initiator's IPI round trips to every sibling (rate and
/// latency), or a responder's acknowledgements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShootdownDoc {
    pub initiator: bool,
    /// The initiator's round trips, a responder's acknowledgements.
    pub count: u64,
    /// The initiator's round trips per second (null on a responder).
    pub roundtrips_per_s: Option<f64>,
    /// The initiator: how many siblings it asks; a responder: its vCPU.
    pub peer: u32,
    pub latency: Option<LatencyDoc>,
}

/// `server`: the VM's requests, reported by its dispatcher vCPU (null on
/// the workers).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerDoc {
    pub requests: u64,
    /// Requests served per second, from the start to the last one's end.
    pub requests_per_s: Option<f64>,
    pub offered: u64,
    pub dropped: u64,
    pub request_latency: Option<LatencyDoc>,
}

/// The vCPU's steal time as its guest read it (KVM's steal-time area, where
/// the hypervisor offers it): over its life and over its workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StealDoc {
    pub steal_ns: u64,
    pub workload_steal_ns: u64,
}

/// What a vCPU's guest workload measured: one section per workload kind,
/// null for the kinds it did not run; `steal`, null where the guest read
/// no steal time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuestDoc {
    pub cpu: Option<CpuDoc>,
    pub sleep: Option<SleepDoc>,
    pub pingpong: Option<PingpongDoc>,
    pub burst: Option<BurstDoc>,
    pub spinlock: Option<SpinlockDoc>,
    pub barrier: Option<BarrierDoc>,
    pub shootdown: Option<ShootdownDoc>,
    pub server: Option<ServerDoc>,
    pub steal: Option<StealDoc>,
}

fn guest(m: Option<&VcpuMetrics>, w: Option<&VcpuWork>, tsc_khz: u32) -> GuestDoc {
    let rate = m.and_then(|m| m.units_per_s);
    let cpu = (w.is_some() || rate.is_some()).then(|| CpuDoc {
        units: w.map(|w| w.units),
        units_per_s: rate.or(w.and_then(|w| w.units_per_s)),
        duration_ns: w.filter(|_| tsc_khz > 0).map(|w| {
            (u128::from(w.ticks) * 1_000_000 / u128::from(tsc_khz)).min(u64::MAX as u128) as u64
        }),
        done: w.is_some_and(|w| w.done),
    });
    GuestDoc {
        cpu,
        sleep: m.and_then(|m| {
            let s = m.sleep.as_ref();
            let l = m.sleep_latency_ns.as_ref();
            (s.is_some() || l.is_some()).then(|| SleepDoc {
                wakeups: s.map_or(0, |s| s.wakes),
                missed: s.map_or(0, |s| s.missed),
                interval_ns: s.map_or(0, |s| s.interval_ns),
                wake_latency: l.map(latency),
            })
        }),
        pingpong: m.and_then(|m| {
            m.pingpong.as_ref().map(|p| PingpongDoc {
                roundtrips: p.roundtrips,
                roundtrips_per_s: m.roundtrips_per_s,
                partner_vcpu: p.partner,
                initiator: p.initiator,
            })
        }),
        burst: m.and_then(|m| {
            m.burst.as_ref().map(|b| BurstDoc {
                bursts: b.bursts,
                missed: b.missed,
                run_fraction: b.run_fraction,
                busy_fraction: b.busy_fraction,
                wake_latency: b.wake_latency_ns.as_ref().map(latency),
            })
        }),
        spinlock: m.and_then(|m| {
            m.spinlock.as_ref().map(|s| SpinlockDoc {
                acquisitions: s.acquisitions,
                acquisitions_per_s: m.acquisitions_per_s,
                max_wait_ns: s.max_wait_ns,
                cs_ns: s.cs_ns,
                lock_wait: s.wait_ns.as_ref().map(latency),
            })
        }),
        barrier: m.and_then(|m| {
            m.barrier.as_ref().map(|b| BarrierDoc {
                rounds: b.rounds,
                rounds_per_s: m.rounds_per_s,
                participants: b.participants,
                spin_share: b.spin_share,
            })
        }),
        shootdown: m.and_then(|m| {
            m.shootdown.as_ref().map(|s| ShootdownDoc {
                initiator: s.initiator,
                count: s.count,
                roundtrips_per_s: m.shootdowns_per_s,
                peer: s.peer,
                latency: s.latency_ns.as_ref().map(latency),
            })
        }),
        server: m.and_then(|m| {
            m.server.as_ref().map(|s| ServerDoc {
                requests: s.requests,
                requests_per_s: m.requests_per_s,
                offered: s.offered,
                dropped: s.dropped,
                request_latency: s.request_latency_ns.as_ref().map(latency),
            })
        }),
        steal: m.and_then(|m| {
            m.steal.as_ref().map(|s| StealDoc {
                steal_ns: s.steal_ns,
                workload_steal_ns: s.workload_steal_ns,
            })
        }),
    }
}

/// The scheduler's wake-to-run latency of a vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WakeLatencyDoc {
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// How a vCPU was scheduled, the same fields under every policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchedDoc {
    /// Time it ran on a host CPU (null: the counters could not be read).
    pub run_ns: Option<u64>,
    /// Time it was runnable but waited for a CPU (steal time).
    pub ready_wait_ns: u64,
    pub wakeups: u64,
    /// Wake event -> running again; null under `host` (the kernel keeps none).
    pub wake_latency: Option<WakeLatencyDoc>,
    pub migrations: u64,
    pub preemptions: u64,
    /// Host CPUs it ran on (Linux list syntax); null under `host`.
    pub host_cpus: Option<String>,
    /// Pacer's halt polling after its blocks; null under `host` (KVM
    /// polls there, in the kernel, and counts it in its own statistics).
    pub halt_poll: Option<HaltPollDoc>,
    /// Times its thread was placed beside the sibling that owned a CPU
    /// (`ranked`, a co-scheduled VM wider than its CPUs).
    pub beside_sibling: u64,
    /// Shared turns its thread ended at their slice's end, in place of
    /// the owning sibling's thread, which it kept off the CPU.
    pub shared_turns_ended: u64,
    /// Times its thread took the host kernel's turns beside its siblings
    /// at the long slice (its VM's siblings spinning together).
    pub long_turns: u64,
}

/// Halt polling after a vCPU's blocks (`VcpuSchedStats::halt_poll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HaltPollDoc {
    /// Polls begun (a block with a non-zero window).
    pub polls: u64,
    /// Polls that found their work: the vCPU was dispatched again with no
    /// sleep and no futex wake.
    pub woken: u64,
    /// Time spent polling, successful or not.
    pub polled_ns: u64,
}

fn sched(s: &VcpuSchedStats, worked: bool) -> SchedDoc {
    let l = s.wake_latency_ns;
    SchedDoc {
        // A vCPU that did work ran: 0 means the counters were not readable.
        run_ns: if s.run_ns == 0 && worked {
            None
        } else {
            Some(s.run_ns)
        },
        ready_wait_ns: s.ready_wait_ns,
        wakeups: s.wakeups,
        wake_latency: (l.max != 0).then_some(WakeLatencyDoc {
            p50_ns: l.p50,
            p99_ns: l.p99,
            p999_ns: l.p999,
            max_ns: l.max,
        }),
        migrations: s.migrations,
        preemptions: s.preemptions,
        host_cpus: nonempty(&s.host_cpus),
        // The engine names the CPUs of every vCPU it ran; none: `host`.
        halt_poll: (!s.host_cpus.is_empty()).then_some(HaltPollDoc {
            polls: s.halt_poll.polls,
            woken: s.halt_poll.woken,
            polled_ns: s.halt_poll.polled_ns,
        }),
        beside_sibling: s.beside_sibling,
        shared_turns_ended: s.shared_turns_ended,
        long_turns: s.long_turns,
    }
}

/// Whether the guest reported work done on this vCPU (then it ran, and a
/// run time of 0 means the host's counters could not be read).
fn did_work(g: &GuestDoc) -> bool {
    g.cpu.as_ref().is_some_and(|c| c.units.unwrap_or(0) > 0)
        || g.pingpong.as_ref().is_some_and(|p| p.roundtrips > 0)
        || g.spinlock.as_ref().is_some_and(|s| s.acquisitions > 0)
        || g.burst.as_ref().is_some_and(|b| b.bursts > 0)
        || g.sleep.as_ref().is_some_and(|s| s.wakeups > 0)
        || g.barrier.as_ref().is_some_and(|b| b.rounds > 0)
        || g.shootdown.as_ref().is_some_and(|s| s.count > 0)
}

/// One vCPU of a VM: its guest's figures, its scheduling, its exits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VcpuDoc {
    pub vcpu: u32,
    pub guest: GuestDoc,
    /// Null when the VM stopped before the vCPU ran.
    pub sched: Option<SchedDoc>,
    pub exits: Option<VcpuStats>,
}

/// A boot milestone: ns since the VM (and the run) started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MilestonesDoc {
    pub first_instruction_ns: Option<u64>,
    pub kernel_ready_ns: Option<u64>,
    pub workload_start_ns: Option<u64>,
    pub workload_done_ns: Option<u64>,
    pub first_result_ns: Option<u64>,
    pub smp_start_ns: Option<u64>,
    pub smp_ready_ns: Option<u64>,
    pub first_instruction_run_ns: Option<u64>,
    pub first_result_run_ns: Option<u64>,
}

/// A marker the guest wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MarkerDoc {
    pub vcpu: u32,
    pub marker: String,
    /// Since the VM started, and since `pacer run` started.
    pub t_ns: u64,
    pub t_run_ns: u64,
}

impl MarkerDoc {
    pub fn of(m: &MarkerEntry) -> MarkerDoc {
        MarkerDoc {
            vcpu: m.vcpu,
            marker: m.marker.clone(),
            t_ns: ms_to_ns(m.t_ms),
            t_run_ns: ms_to_ns(m.t_run_ms),
        }
    }
}

/// A result record with its values named (guests/PROTOCOL.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordDoc {
    pub vcpu: u32,
    pub t_ns: u64,
    pub t_run_ns: u64,
    pub kind: devices::RecordKind,
    pub seq: u32,
    /// The guest's TSC when it wrote the record.
    pub tsc: u64,
    /// The values by name; what they are depends on `kind`.
    pub data: Value,
    /// A TEXT record's string.
    pub text: Option<String>,
}

/// The named values of a record.
fn record_data(kind: RecordKind, v: &[u64; 5]) -> Value {
    match (kind, decode(kind, v)) {
        (RecordKind::WorkSample, _) => json!({
            "units": v[0], "ticks": v[1], "total_units": v[2], "total_ticks": v[3],
        }),
        (RecordKind::WorkDone, _) => json!({
            "units": v[0], "ticks": v[1], "guest_units_per_s": v[2],
        }),
        (RecordKind::BootTimes, _) => json!({
            "first_instruction_tsc": v[0], "kernel_ready_tsc": v[1],
            "smp_done_tsc": v[2], "cpus_online": v[3],
        }),
        (RecordKind::Text, _) => json!({ "address": v[0], "length": v[1] }),
        (_, Ok(Payload::Error(e))) => json!({
            "code": e.code, "name": e.name, "detail": e.detail,
        }),
        (_, Ok(Payload::Latency(l))) => json!({
            "metric": l.metric, "count": l.count, "p50_ns": l.p50_ns,
            "p99_ns": l.p99_ns, "max_ns": l.max_ns,
        }),
        (_, Ok(Payload::Histogram(h))) => json!({
            "metric": h.metric,
            "buckets": h.buckets.iter().filter_map(|&(b, count)| {
                let (lo_ns, hi_ns) = bucket_range(b)?;
                Some(BucketDoc { lo_ns, hi_ns, count })
            }).collect::<Vec<_>>(),
        }),
        (
            _,
            Ok(Payload::SleepDone {
                wakes,
                missed,
                interval_ns,
                ticks,
            }),
        ) => json!({
            "wakeups": wakes, "missed": missed, "interval_ns": interval_ns, "ticks": ticks,
        }),
        (
            _,
            Ok(Payload::PingpongDone {
                roundtrips,
                ticks,
                partner,
                initiator,
            }),
        ) => json!({
            "roundtrips": roundtrips, "ticks": ticks, "guest_roundtrips_per_s": v[2],
            "partner_vcpu": partner, "initiator": initiator,
        }),
        (
            _,
            Ok(Payload::BurstDone {
                bursts,
                missed,
                ticks,
                busy_ticks,
                run_fraction_ppm,
            }),
        ) => json!({
            "bursts": bursts, "missed": missed, "ticks": ticks, "busy_ticks": busy_ticks,
            "run_fraction_ppm": run_fraction_ppm,
        }),
        (
            _,
            Ok(Payload::SpinlockDone {
                acquisitions,
                ticks,
                max_wait_ns,
                cs_ns,
            }),
        ) => json!({
            "acquisitions": acquisitions, "ticks": ticks, "guest_acquisitions_per_s": v[2],
            "max_wait_ns": max_wait_ns, "cs_ns": cs_ns,
        }),
        (
            _,
            Ok(Payload::BarrierDone {
                rounds,
                ticks,
                spin_ticks,
                participants,
            }),
        ) => json!({
            "rounds": rounds, "ticks": ticks, "guest_rounds_per_s": v[2],
            "spin_ticks": spin_ticks, "participants": participants,
        }),
        (
            _,
            Ok(Payload::ShootdownDone {
                count,
                ticks,
                peer,
                initiator,
            }),
        ) => json!({
            "count": count, "ticks": ticks, "guest_per_s": v[2], "peer": peer,
            "initiator": initiator,
        }),
        (
            _,
            Ok(Payload::ServerDone {
                requests,
                ticks,
                offered,
                dropped,
            }),
        ) => json!({
            "requests": requests, "ticks": ticks, "guest_requests_per_s": v[2],
            "offered": offered, "dropped": dropped,
        }),
        (
            _,
            Ok(Payload::Steal {
                steal_ns,
                workload_steal_ns,
                ticks,
            }),
        ) => json!({
            "steal_ns": steal_ns, "workload_steal_ns": workload_steal_ns, "ticks": ticks,
        }),
        // Accepted records always decode; keep the words if one does not.
        (_, _) => json!({ "words": v }),
    }
}

impl RecordDoc {
    pub fn of(r: &RecordEntry) -> RecordDoc {
        RecordDoc {
            vcpu: r.vcpu,
            t_ns: ms_to_ns(r.t_ms),
            t_run_ns: ms_to_ns(r.t_run_ms),
            kind: r.record.kind,
            seq: r.record.seq,
            tsc: r.record.tsc,
            data: record_data(r.record.kind, &r.record.values),
            text: r.record.text.clone(),
        }
    }
}

/// A guest ERROR record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuestErrorDoc {
    pub vcpu: u32,
    pub code: devices::result_payload::GuestErrorCode,
    pub name: String,
    pub detail: u64,
}

/// The files a VM wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilesDoc {
    /// Its `<vm>.results.jsonl` (`pacer-vm-events`).
    pub results: Option<PathBuf>,
    pub console: Option<PathBuf>,
    /// A Linux guest's user command output.
    pub user: Option<PathBuf>,
}

/// One VM of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmDoc {
    pub name: String,
    /// "success", "reset", "poweroff", "guest_exit", "debug_exit",
    /// "triple_fault", "internal_error", "timeout", "stopped", "error", ...
    pub status: String,
    pub ok: bool,
    pub message: Option<String>,
    /// The exit status the guest asked for (bench exit port, or
    /// `(v << 1) | 1` of isa-debug-exit).
    pub exit_status: Option<u64>,
    pub wall_ns: u64,
    pub tsc_khz: Option<u32>,
    pub cmdline: String,
    pub milestones: MilestonesDoc,
    /// Units/s of every vCPU added up (`cpu` workloads).
    pub total_units_per_s: Option<f64>,
    pub vcpus: Vec<VcpuDoc>,
    pub guest_errors: Vec<GuestErrorDoc>,
    pub markers: Vec<MarkerDoc>,
    /// The first records (`RECORDS_KEPT`); the results file has them all.
    pub records: Vec<RecordDoc>,
    /// Records after those: in the results file only.
    pub records_not_kept: u64,
    pub rejected_records: usize,
    pub files: FilesDoc,
    /// Its vCPUs' wake-to-run bound (`latency_bound_us`), the wakes that
    /// came with budget for it and those later than the bound, summed over
    /// its vCPUs (the scheduler's counts); null when it was promised none.
    pub latency_bound_ns: Option<u64>,
    pub bounded_wakes: Option<u64>,
    pub bound_misses: Option<u64>,
}

/// The per-vCPU objects of a VM, from its parallel in-memory lists.
fn vcpus(r: &VmResult) -> Vec<VcpuDoc> {
    vcpu_docs(
        0,
        &r.vcpu_metrics,
        &r.work,
        &r.vcpu_stats,
        &r.vcpu_sched,
        r.tsc_khz,
    )
}

/// One object per vCPU (at least `vcpus`, more if any list names more).
fn vcpu_docs(
    vcpus: usize,
    metrics: &[VcpuMetrics],
    work: &[VcpuWork],
    exits: &[VcpuStats],
    sched_stats: &[VcpuSchedStats],
    tsc_khz: u32,
) -> Vec<VcpuDoc> {
    let n = [
        vcpus,
        sched_stats.len(),
        exits.len(),
        metrics
            .iter()
            .map(|m| m.vcpu as usize + 1)
            .max()
            .unwrap_or(0),
        work.iter().map(|w| w.vcpu as usize + 1).max().unwrap_or(0),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    (0..n as u32)
        .map(|v| {
            let m = metrics.iter().find(|m| m.vcpu == v);
            let w = work.iter().find(|w| w.vcpu == v);
            let guest = guest(m, w, tsc_khz);
            let worked = did_work(&guest);
            VcpuDoc {
                vcpu: v,
                sched: sched_stats.get(v as usize).map(|s| sched(s, worked)),
                exits: exits.get(v as usize).copied(),
                guest,
            }
        })
        .collect()
}

impl VmDoc {
    pub fn of(r: &VmResult) -> VmDoc {
        let m = &r.milestones;
        let ns = |v: Option<f64>| v.map(ms_to_ns);
        let bound = r.vcpu_sched.iter().find_map(|s| s.latency_bound_ns);
        VmDoc {
            name: r.name.clone(),
            status: r.status.clone(),
            ok: r.ok,
            message: nonempty(&r.message),
            exit_status: r.exit_status,
            wall_ns: ms_to_ns(r.wall_ms),
            tsc_khz: nonzero(u64::from(r.tsc_khz)).map(|k| k as u32),
            cmdline: r.cmdline.clone(),
            milestones: MilestonesDoc {
                first_instruction_ns: ns(m.first_instruction_ms),
                kernel_ready_ns: ns(m.kernel_ready_ms),
                workload_start_ns: ns(m.workload_start_ms),
                workload_done_ns: ns(m.workload_done_ms),
                first_result_ns: ns(m.first_result_ms),
                smp_start_ns: ns(m.smp_start_ms),
                smp_ready_ns: ns(m.smp_ready_ms),
                first_instruction_run_ns: ns(m.first_instruction_run_ms),
                first_result_run_ns: ns(m.first_result_run_ms),
            },
            total_units_per_s: r.total_units_per_s,
            vcpus: vcpus(r),
            guest_errors: r
                .guest_errors
                .iter()
                .map(|e| GuestErrorDoc {
                    vcpu: e.vcpu,
                    code: e.error.code,
                    name: e.error.name.clone(),
                    detail: e.error.detail,
                })
                .collect(),
            markers: r.markers.iter().map(MarkerDoc::of).collect(),
            records: r.records.iter().map(RecordDoc::of).collect(),
            records_not_kept: r.records_not_kept,
            rejected_records: r.rejected_records,
            files: FilesDoc {
                results: r.results_file.clone(),
                console: r.console_log.clone(),
                user: r.user_log.clone(),
            },
            latency_bound_ns: bound,
            bounded_wakes: bound.map(|_| r.vcpu_sched.iter().map(|s| s.bounded_wakes).sum()),
            bound_misses: bound.map(|_| r.vcpu_sched.iter().map(|s| s.bound_misses).sum()),
        }
    }
}

/// A change made through the control API while the VMs ran (the same
/// record as the run directory's `control.jsonl`, times in ns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlChangeDoc {
    /// Since `pacer run` started.
    pub t_run_ns: u64,
    /// Wall-clock time, since the Unix epoch.
    pub unix_time_ns: u64,
    /// The uid of the API socket's peer that asked.
    pub uid: u32,
    /// `VM`, `VM/VCPU` or `host`.
    pub target: String,
    /// The key set (`affinity`, `priority`, `mode`, ...) or `state`.
    pub key: String,
    /// The value before (null when there was none to read).
    pub previous: Option<String>,
    pub value: String,
}

impl ControlChangeDoc {
    pub fn of(c: &super::ControlChange) -> ControlChangeDoc {
        ControlChangeDoc {
            t_run_ns: c.t_run_ns,
            unix_time_ns: c.unix_time_ns,
            uid: c.uid,
            target: c.target.clone(),
            key: c.key.clone(),
            previous: c.previous.clone(),
            value: c.value.clone(),
        }
    }
}

/// The first line of a `<vm>.results.jsonl` (`pacer-vm-events`).
pub fn events_start(vm: &str, tsc_khz: u32) -> Value {
    let mut v = serde_json::to_value(Header::new(VM_EVENTS)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("type".into(), "start".into());
        o.insert("vm".into(), vm.into());
        o.insert("tsc_khz".into(), json!(nonzero(u64::from(tsc_khz))));
    }
    v
}

/// The last line of a `<vm>.results.jsonl` that could not be written whole:
/// why, and how many lines were lost (the stop line among them).
pub fn events_incomplete(vm: &str, reason: &str, lines_lost: u64, t_ms: f64) -> Value {
    event(
        "incomplete",
        vm,
        json!({ "reason": reason, "lines_lost": lines_lost, "t_ns": ms_to_ns(t_ms) }),
    )
}

/// A line of a `<vm>.results.jsonl`: `type` and `vm`, then `fields`.
pub fn event(kind: &str, vm: &str, fields: impl Serialize) -> Value {
    let mut v = json!({ "type": kind, "vm": vm });
    if let (Some(o), Ok(Value::Object(f))) = (v.as_object_mut(), serde_json::to_value(fields)) {
        o.extend(f);
    }
    v
}

/// The per-vCPU objects of a stop line: every vCPU of the VM (at least
/// `vcpus`), each with its guest's figures, its scheduling and its exits,
/// as in the `pacer-run` document. A VM stopped while paused, or by its
/// timeout, still has its vCPUs' counters though its guest sent nothing.
pub fn events_vcpus(
    vcpus: usize,
    metrics: &[VcpuMetrics],
    work: &[VcpuWork],
    exits: &[VcpuStats],
    sched: &[VcpuSchedStats],
    tsc_khz: u32,
) -> Vec<VcpuDoc> {
    vcpu_docs(vcpus, metrics, work, exits, sched, tsc_khz)
}
