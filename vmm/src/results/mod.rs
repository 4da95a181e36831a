//! Results of a run: the per-VM JSON-lines log written as events arrive
//! (`<log_dir>/<vm>.results.jsonl`, one line per marker/record/stop, each
//! written with a single `write` so nothing is lost if Pacer dies), the
//! in-memory collection, the per-VM summary and the final JSON.
//!
//! A line that cannot be written (a full disk, a file-size limit) is a
//! failed VM, never a quiet loss: the file is cut back to its last whole
//! line, nothing more is appended but a final `incomplete` line naming the
//! failure (written if the disk takes it), and the VM's result becomes
//! [`STATUS_WRITE_ERROR`] (`pacer run` exits 3). A results log without a
//! `stop` line is incomplete whatever its last line.

pub mod events;

use crate::guest_metrics::{GuestErrorEntry, LatencySummary, MetricsFold, VcpuMetrics};
use crate::units;
use devices::{Marker, RecordError, RecordKind, ResultRecord};
use events::{MarkerDoc, RecordDoc};
use serde::Serialize;
use std::fs::File;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a guest may write into its logs: a guest decides how much it
/// prints and reports, so each VM's console log (and user log) and results
/// log hold at most `log_bytes`, and its markers, records and rejected
/// records are admitted at most `records_per_s` per second (a bucket of one
/// second's worth). What is refused is counted and named by a `dropped`
/// line (the first time, and with the totals before the stop line); it is
/// neither written nor kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    pub log_bytes: u64,
    pub records_per_s: u32,
}

/// `host.log_limit_kib`'s default: 64 MiB per log per VM.
pub const DEFAULT_LOG_LIMIT_KIB: u64 = 64 << 10;
/// `host.result_records_per_s`'s default (a bench guest sends tens).
pub const DEFAULT_RECORDS_PER_S: u32 = 10_000;

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            log_bytes: DEFAULT_LOG_LIMIT_KIB << 10,
            records_per_s: DEFAULT_RECORDS_PER_S,
        }
    }
}

/// How many result records a VM's results keep in memory for its run
/// document: the first ones (a bench cell sends tens). Later records are
/// in the results file only and counted (`records_not_kept`); the metrics,
/// the work and the guest's errors are folded as records arrive, so a run
/// of hours holds what a run of seconds does.
pub const RECORDS_KEPT: usize = 4096;

/// The status of a VM whose results or logs could not all be written.
pub const STATUS_WRITE_ERROR: &str = "write_error";

/// A marker with its host timestamps.
#[derive(Debug, Clone, Serialize)]
pub struct MarkerEntry {
    pub vcpu: u32,
    pub marker: String,
    /// Milliseconds since the VM was started.
    pub t_ms: f64,
    /// Milliseconds since the `pacer run` process started.
    pub t_run_ms: f64,
}

/// A result record with its host timestamps.
#[derive(Debug, Clone, Serialize)]
pub struct RecordEntry {
    pub vcpu: u32,
    pub t_ms: f64,
    pub t_run_ms: f64,
    #[serde(flatten)]
    pub record: ResultRecord,
    /// For WORK_SAMPLE/WORK_DONE: units per second recomputed by the VMM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units_per_s: Option<f64>,
}

/// Boot milestones of a VM (ms since VM start), from the first marker of
/// each kind / the first record.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Milestones {
    pub first_instruction_ms: Option<f64>,
    pub kernel_ready_ms: Option<f64>,
    pub workload_start_ms: Option<f64>,
    pub workload_done_ms: Option<f64>,
    pub first_result_ms: Option<f64>,
    /// The boot vCPU started the APs / had them all online (SMP guests).
    pub smp_start_ms: Option<f64>,
    pub smp_ready_ms: Option<f64>,
    /// The same, relative to the start of the run.
    pub first_instruction_run_ms: Option<f64>,
    pub first_result_run_ms: Option<f64>,
}

/// Per-vCPU work totals from WORK_DONE (or the last WORK_SAMPLE).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VcpuWork {
    pub vcpu: u32,
    pub units: u64,
    pub ticks: u64,
    pub units_per_s: Option<f64>,
    pub done: bool,
}

/// Outcome of one VM. Serialized as the published `pacer-run` shape
/// (`events::VmDoc`), never field by field.
#[derive(Debug, Clone)]
pub struct VmResult {
    pub name: String,
    /// "success", "reset", "guest_exit", "triple_fault", "internal_error",
    /// "fail_entry", "timeout", "error", ...
    pub status: String,
    pub ok: bool,
    pub message: String,
    /// The exit status the guest asked for: the bench exit port's value,
    /// or `(v << 1) | 1` for a write of `v` to isa-debug-exit (QEMU's
    /// convention; kvm-unit-tests' 1 means every test passed). None when
    /// the VM stopped for another reason.
    pub exit_status: Option<u64>,
    pub wall_ms: f64,
    pub tsc_khz: u32,
    pub cmdline: String,
    pub milestones: Milestones,
    pub work: Vec<VcpuWork>,
    /// Sum over vCPUs of units per second.
    pub total_units_per_s: Option<f64>,
    /// Per-vCPU metrics of the guest's workload (sleep latency, round
    /// trips/s, acquisitions/s, burst run fraction, units/s), in vCPU order.
    pub vcpu_metrics: Vec<VcpuMetrics>,
    /// The guest's ERROR records (bad parameter, AP that did not start, ...).
    pub guest_errors: Vec<GuestErrorEntry>,
    pub markers: Vec<MarkerEntry>,
    /// The first `RECORDS_KEPT` records.
    pub records: Vec<RecordEntry>,
    /// Records after those, in the results file only.
    pub records_not_kept: u64,
    pub rejected_records: usize,
    pub results_file: Option<PathBuf>,
    pub console_log: Option<PathBuf>,
    /// A Linux guest's user command output (`UB user begin` .. `UB user
    /// end` on its console), written to `<log_dir>/<vm>.user.log`.
    pub user_log: Option<PathBuf>,
    /// Per-vCPU exit counters, in vCPU order.
    pub vcpu_stats: Vec<vcpu_engine::vcpu::VcpuStats>,
    /// Per-vCPU scheduling statistics, in vCPU order (the same fields under
    /// every policy; see `engine::stats`).
    pub vcpu_sched: Vec<vcpu_engine::stats::VcpuSchedStats>,
}

impl VmResult {
    /// A VM that failed before it produced anything (setup error, lost
    /// controller thread): status "error", no markers, records or work.
    pub fn error(name: &str, message: String, wall_ms: f64, cmdline: &str) -> VmResult {
        VmResult {
            name: name.to_string(),
            status: "error".into(),
            ok: false,
            message,
            exit_status: None,
            wall_ms,
            tsc_khz: 0,
            cmdline: cmdline.to_string(),
            milestones: Default::default(),
            work: Vec::new(),
            total_units_per_s: None,
            vcpu_metrics: Vec::new(),
            guest_errors: Vec::new(),
            markers: Vec::new(),
            records: Vec::new(),
            records_not_kept: 0,
            rejected_records: 0,
            results_file: None,
            console_log: None,
            user_log: None,
            vcpu_stats: Vec::new(),
            vcpu_sched: Vec::new(),
        }
    }
}

impl Serialize for VmResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        events::VmDoc::of(self).serialize(s)
    }
}

/// One change made through the control API while the VMs ran (its
/// record: `crate::api::audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlChange {
    /// Nanoseconds since the run started.
    pub t_run_ns: u64,
    /// Wall-clock time, nanoseconds since the Unix epoch.
    pub unix_time_ns: u64,
    /// Who asked: the uid of the peer of the API socket.
    pub uid: u32,
    /// `VM`, `VM/VCPU` or `host`.
    pub target: String,
    /// The key set (`affinity`, `priority`, `mode`, ...) or the action
    /// (`state` for pause, resume, stop).
    pub key: String,
    /// The value before the change (`null` when there was none to read).
    pub previous: Option<String>,
    pub value: String,
}

/// The results of one run (`pacer::documents::run::RunEntry` is what `--json`
/// writes of it).
#[derive(Debug, Clone)]
pub struct RunResults {
    pub config: PathBuf,
    /// This run's directory of consoles and results (`run_dir`).
    pub run_dir: Option<PathBuf>,
    pub ok: bool,
    pub vms: Vec<VmResult>,
    /// The scheduling trace, when one was recorded (`--trace`).
    pub trace: Option<vcpu_engine::trace::TraceOutcome>,
    /// What was changed through the control API while the VMs ran (also
    /// `control.jsonl` in the run directory).
    pub control_changes: Vec<ControlChange>,
    /// The scheduler's per-CPU counters once every VM has ended (whole
    /// run; None under `host`, which has no scheduler of Pacer's).
    pub sched_cpus: Option<Vec<vcpu_sched::stats::CpuStats>>,
}

/// What a stop line says of the VM's vCPUs beyond its guest's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct StopVcpus<'a> {
    /// How many vCPUs the VM has (each gets an entry).
    pub count: usize,
    /// Their exits, by vCPU index.
    pub exits: &'a [vcpu_engine::vcpu::VcpuStats],
    /// Their scheduling counters, by vCPU index.
    pub sched: &'a [vcpu_engine::stats::VcpuSchedStats],
}

/// Collects a VM's events and appends them to its JSON-lines file.
pub struct ResultsLog {
    vm: String,
    tsc_khz: u32,
    path: Option<PathBuf>,
    file: Option<File>,
    pub markers: Vec<MarkerEntry>,
    /// The first `RECORDS_KEPT` records admitted.
    pub records: Vec<RecordEntry>,
    /// Records admitted after those (written, folded, not kept).
    pub records_not_kept: u64,
    /// Every admitted record folded: metrics, work, errors, the first one's
    /// times.
    fold: MetricsFold,
    work: Vec<VcpuWork>,
    errors: Vec<GuestErrorEntry>,
    first_record_ms: Option<(f64, f64)>,
    pub rejected: usize,
    /// Bytes of whole lines in the file.
    written: u64,
    /// The first write that failed (one line); nothing is appended after it
    /// but the `incomplete` line.
    write_error: Option<String>,
    /// Lines not written because of `write_error`.
    lost: u64,
    limits: LogLimits,
    /// Admission tokens (the rate limit) and when they were last refilled.
    tokens: f64,
    refilled_ms: f64,
    /// Lines refused past the rate limit / past the log limit.
    dropped_rate: u64,
    dropped_size: u64,
}

impl ResultsLog {
    /// `path`: the JSON-lines file (None: keep in memory only).
    pub fn create(vm: &str, tsc_khz: u32, path: Option<&Path>) -> Result<ResultsLog, ResultsError> {
        let file = match path {
            Some(p) => Some(File::create(p).map_err(|source| ResultsError::Create {
                path: p.to_path_buf(),
                source,
            })?),
            None => None,
        };
        let mut log = ResultsLog {
            vm: vm.to_string(),
            tsc_khz,
            path: path.map(Path::to_path_buf),
            file,
            markers: Vec::new(),
            records: Vec::new(),
            records_not_kept: 0,
            fold: MetricsFold::new(tsc_khz),
            work: Vec::new(),
            errors: Vec::new(),
            first_record_ms: None,
            rejected: 0,
            written: 0,
            write_error: None,
            lost: 0,
            limits: LogLimits::default(),
            tokens: f64::from(DEFAULT_RECORDS_PER_S),
            refilled_ms: 0.0,
            dropped_rate: 0,
            dropped_size: 0,
        };
        log.append(events::events_start(vm, tsc_khz));
        Ok(log)
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn append(&mut self, value: serde_json::Value) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        if self.write_error.is_some() {
            self.lost += 1;
            return;
        }
        let mut line = value.to_string();
        line.push('\n');
        // One write(2) per line: a crash loses at most the line in flight.
        match f.write_all(line.as_bytes()) {
            Ok(()) => self.written += line.len() as u64,
            Err(e) => {
                // Cut a torn line off (the file ends with a whole line) and
                // write the incomplete line, if any, after it.
                let _ = f.set_len(self.written);
                let _ = f.seek(std::io::SeekFrom::Start(self.written));
                let path = self
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let why = format!("cannot write {path}: {e}");
                log::error!(
                    "[{}] {why}; nothing more is written to it and the VM fails",
                    self.vm
                );
                self.write_error = Some(why);
                self.lost += 1;
            }
        }
    }

    /// Apply `limits` from now on.
    pub fn with_limits(mut self, limits: LogLimits) -> Self {
        self.limits = limits;
        self.tokens = f64::from(limits.records_per_s);
        self
    }

    /// Lines refused: (past the rate limit, past the log limit).
    pub fn dropped(&self) -> (u64, u64) {
        (self.dropped_rate, self.dropped_size)
    }

    /// Whether a guest line at `t_ms` (of `len` bytes) is admitted: within
    /// the rate limit and the log limit. The first refusal writes a
    /// `dropped` line saying why.
    fn admit(&mut self, t_ms: f64, len: usize) -> bool {
        let rate = f64::from(self.limits.records_per_s);
        let elapsed = (t_ms - self.refilled_ms).max(0.0);
        self.tokens = (self.tokens + elapsed * rate / 1e3).min(rate.max(1.0));
        self.refilled_ms = t_ms.max(self.refilled_ms);
        let reason = if self.tokens < 1.0 {
            self.dropped_rate += 1;
            format!(
                "more than {} result records per second (host.result_records_per_s): records are dropped while the guest sends faster",
                self.limits.records_per_s
            )
        } else if self.written + len as u64 > self.limits.log_bytes {
            self.dropped_size += 1;
            format!(
                "the results log reached {} bytes (host.log_limit_kib): later records are dropped",
                self.limits.log_bytes
            )
        } else {
            self.tokens -= 1.0;
            return true;
        };
        if self.dropped_rate + self.dropped_size == 1 {
            self.note_dropped(&reason, t_ms);
        }
        false
    }

    /// A `dropped` line: why, and the counts so far.
    fn note_dropped(&mut self, reason: &str, t_ms: f64) {
        let v = events::event(
            "dropped",
            &self.vm,
            serde_json::json!({
                "reason": reason, "rate_limited": self.dropped_rate,
                "over_limit": self.dropped_size, "t_ns": crate::documents::ms_to_ns(t_ms),
            }),
        );
        self.append(v);
    }

    /// What was dropped, in words (None: nothing).
    pub fn dropped_summary(&self) -> Option<String> {
        let (r, z) = (self.dropped_rate, self.dropped_size);
        (r + z > 0).then(|| {
            format!(
                "{} guest result line(s) dropped: {r} past {} per second, {z} past the {}-byte log limit",
                r + z,
                self.limits.records_per_s,
                self.limits.log_bytes
            )
        })
    }

    /// The first failed write of this log, if any (one line).
    pub fn write_error(&self) -> Option<&str> {
        self.write_error.as_deref()
    }

    /// After a failed write: the `incomplete` line (the failure, how many
    /// lines were lost), if the file takes it.
    fn mark_incomplete(&mut self, t_ms: f64) {
        let (Some(f), Some(why)) = (self.file.as_mut(), self.write_error.as_ref()) else {
            return;
        };
        let mut line = events::events_incomplete(&self.vm, why, self.lost, t_ms).to_string();
        line.push('\n');
        match f.write_all(line.as_bytes()) {
            Ok(()) => self.written += line.len() as u64,
            Err(_) => {
                let _ = f.set_len(self.written);
                let _ = f.seek(std::io::SeekFrom::Start(self.written));
            }
        }
    }

    /// A guest marker; false if it was dropped (rate or log limit).
    pub fn marker(&mut self, vcpu: u32, marker: Marker, t_ms: f64, t_run_ms: f64) -> bool {
        let e = MarkerEntry {
            vcpu,
            marker: marker.name(),
            t_ms,
            t_run_ms,
        };
        let line = events::event("marker", &self.vm, MarkerDoc::of(&e));
        if !self.admit(t_ms, line.to_string().len() + 1) {
            return false;
        }
        self.append(line);
        self.markers.push(e);
        true
    }

    /// A guest result record; false if it was dropped.
    pub fn record(&mut self, vcpu: u32, record: ResultRecord, t_ms: f64, t_run_ms: f64) -> bool {
        let units_per_s = match record.kind {
            RecordKind::WorkSample | RecordKind::WorkDone => {
                devices::result_port::units_per_second(
                    record.values[0],
                    record.values[1],
                    self.tsc_khz as u64,
                )
            }
            _ => None,
        };
        let e = RecordEntry {
            vcpu,
            t_ms,
            t_run_ms,
            record,
            units_per_s,
        };
        let line = events::event("record", &self.vm, RecordDoc::of(&e));
        if !self.admit(t_ms, line.to_string().len() + 1) {
            return false;
        }
        self.append(line);
        if let Some(error) = self.fold.add(vcpu, &e.record) {
            self.errors.push(error);
        }
        fold_work(&mut self.work, vcpu, &e.record, self.tsc_khz);
        self.first_record_ms.get_or_insert((e.t_ms, e.t_run_ms));
        if self.records.len() < RECORDS_KEPT {
            self.records.push(e);
        } else {
            self.records_not_kept += 1;
        }
        true
    }

    /// A record the guest got wrong; false if it was dropped.
    pub fn rejected(&mut self, vcpu: u32, err: &RecordError, t_ms: f64) -> bool {
        let fields = serde_json::json!({
            "vcpu": vcpu, "error": err.to_string(), "t_ns": crate::documents::ms_to_ns(t_ms),
        });
        let line = events::event("rejected", &self.vm, fields);
        if !self.admit(t_ms, line.to_string().len() + 1) {
            return false;
        }
        self.rejected += 1;
        self.append(line);
        true
    }

    /// The stop line of a VM whose vCPUs' counters are not known (the
    /// guest's figures only).
    pub fn stopped(&mut self, status: &str, ok: bool, message: &str, t_ms: f64) {
        self.stopped_with(status, ok, message, t_ms, StopVcpus::default());
    }

    /// The stop line, which also carries the per-vCPU metrics: every vCPU
    /// of the VM with its guest's figures, its scheduling and its exits.
    pub fn stopped_with(
        &mut self,
        status: &str,
        ok: bool,
        message: &str,
        t_ms: f64,
        vcpus: StopVcpus<'_>,
    ) {
        if let Some(what) = self.dropped_summary() {
            self.note_dropped(&what, t_ms);
        }
        let vcpus = events::events_vcpus(
            vcpus.count,
            &self.vcpu_metrics(),
            &self.work(),
            vcpus.exits,
            vcpus.sched,
            self.tsc_khz,
        );
        let fields = serde_json::json!({
            "status": status, "ok": ok, "message": crate::documents::nonempty(message),
            "t_ns": crate::documents::ms_to_ns(t_ms), "vcpus": vcpus,
        });
        self.append(events::event("stop", &self.vm, fields));
        self.mark_incomplete(t_ms);
    }

    /// Per-vCPU workload metrics from the records so far.
    pub fn vcpu_metrics(&self) -> Vec<VcpuMetrics> {
        self.fold.metrics()
    }

    /// The guest's ERROR records so far.
    pub fn guest_errors(&self) -> Vec<GuestErrorEntry> {
        self.errors.clone()
    }

    /// Boot milestones from what has arrived so far.
    pub fn milestones(&self) -> Milestones {
        let first = |name: &str| self.markers.iter().find(|m| m.marker == name);
        let fi = first("first_instruction");
        Milestones {
            first_instruction_ms: fi.map(|m| m.t_ms),
            kernel_ready_ms: first("kernel_ready").map(|m| m.t_ms),
            workload_start_ms: first("workload_start").map(|m| m.t_ms),
            workload_done_ms: first("workload_done").map(|m| m.t_ms),
            first_result_ms: self.first_record_ms.map(|(t, _)| t),
            smp_start_ms: first("smp_start").map(|m| m.t_ms),
            smp_ready_ms: first("smp_ready").map(|m| m.t_ms),
            first_instruction_run_ms: fi.map(|m| m.t_run_ms),
            first_result_run_ms: self.first_record_ms.map(|(_, t)| t),
        }
    }

    /// Per-vCPU work: WORK_DONE if present, else the last WORK_SAMPLE's
    /// cumulative values.
    pub fn work(&self) -> Vec<VcpuWork> {
        self.work.clone()
    }
}

/// Fold one record into the per-vCPU work (sorted by vCPU): a WORK_DONE
/// replaces what a vCPU had, a WORK_SAMPLE replaces all but a WORK_DONE.
fn fold_work(out: &mut Vec<VcpuWork>, vcpu: u32, r: &ResultRecord, tsc_khz: u32) {
    let (units, ticks, done) = match r.kind {
        RecordKind::WorkDone => (r.values[0], r.values[1], true),
        RecordKind::WorkSample => (r.values[2], r.values[3], false),
        _ => return,
    };
    let w = VcpuWork {
        vcpu,
        units,
        ticks,
        units_per_s: devices::result_port::units_per_second(units, ticks, tsc_khz as u64),
        done,
    };
    match out.binary_search_by_key(&vcpu, |x| x.vcpu) {
        Ok(i) if out[i].done && !done => {}
        Ok(i) => out[i] = w,
        Err(i) => out.insert(i, w),
    }
}

fn ms(v: Option<f64>) -> String {
    v.map(|x| units::duration3(x * 1e6))
        .unwrap_or_else(|| "-".into())
}

/// The human-readable summary of one VM.
pub fn format_summary(r: &VmResult) -> String {
    let mut s = format!(
        "[{}] {}: {}{}\n",
        r.name,
        if r.ok { "OK" } else { "FAILED" },
        r.status,
        if r.message.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.message)
        }
    );
    let m = &r.milestones;
    s += &format!(
        "[{}]   first instruction {}, kernel ready {}, first result {}, wall {}\n",
        r.name,
        ms(m.first_instruction_ms),
        ms(m.kernel_ready_ms),
        ms(m.first_result_ms),
        ms(Some(r.wall_ms))
    );
    for w in &r.work {
        s += &format!(
            "[{}]   vcpu{}: {} work units in {}{} -> {} units/s\n",
            r.name,
            w.vcpu,
            w.units,
            if r.tsc_khz > 0 {
                ms(Some(w.ticks as f64 / r.tsc_khz as f64))
            } else {
                "-".into()
            },
            if w.done { "" } else { " (incomplete)" },
            w.units_per_s
                .map(units::number)
                .unwrap_or_else(|| "-".into())
        );
    }
    for m in &r.vcpu_metrics {
        s += &format_metrics(&r.name, m);
    }
    for (i, v) in r.vcpu_sched.iter().enumerate() {
        s += &format!(
            "[{}]   vcpu{i}: scheduled: run {}, ready-wait {}, {} wake-ups (p99 {}), {} migrations, {} preemptions, CPUs {}\n",
            r.name,
            units::duration3(v.run_ns as f64),
            units::duration3(v.ready_wait_ns as f64),
            v.wakeups,
            if v.wake_latency_ns.max == 0 {
                "-".to_string()
            } else {
                units::latency(v.wake_latency_ns.p99 as f64, units::SCHED_SUB_BUCKETS)
            },
            v.migrations,
            v.preemptions,
            if v.host_cpus.is_empty() { "-" } else { &v.host_cpus },
        );
        if v.beside_sibling > 0 {
            s += &format!(
                "[{}]   vcpu{i}: shared its VM's CPUs: placed beside an owning sibling {} times, ended {} shared turns, {} times at long kernel turns\n",
                r.name, v.beside_sibling, v.shared_turns_ended, v.long_turns,
            );
        }
        let p = v.halt_poll;
        if p.polls > 0 {
            s += &format!(
                "[{}]   vcpu{i}: halt polling: {} polls, {} found their work, {} polling\n",
                r.name,
                p.polls,
                p.woken,
                units::duration3(p.polled_ns as f64),
            );
        }
    }
    for e in &r.guest_errors {
        s += &format!(
            "[{}]   vcpu{}: guest error {:?} {:?} (detail {})\n",
            r.name, e.vcpu, e.error.code, e.error.name, e.error.detail
        );
    }
    if r.rejected_records > 0 {
        s += &format!(
            "[{}]   {} result record(s) rejected\n",
            r.name, r.rejected_records
        );
    }
    if let Some(p) = &r.results_file {
        s += &format!("[{}]   results: {}\n", r.name, p.display());
    }
    if let Some(p) = &r.user_log {
        s += &format!("[{}]   user command output: {}\n", r.name, p.display());
    }
    s
}

/// A guest latency distribution: percentiles no finer than the guest's
/// histogram bucket, the (exact) maximum to three digits.
fn latency(l: &LatencySummary) -> String {
    let p = |ns: u64| units::latency(ns as f64, units::GUEST_SUB_BUCKETS);
    format!(
        "p50 {}, p99 {}, p99.9 {}, max {} over {}",
        p(l.p50_ns),
        p(l.p99_ns),
        p(l.p999_ns),
        units::duration3(l.max_ns as f64),
        l.count
    )
}

/// Summary lines for one vCPU's non-`cpu` metrics (units/s has its own line).
fn format_metrics(vm: &str, m: &VcpuMetrics) -> String {
    let mut s = String::new();
    if let Some(l) = &m.sleep_latency_ns {
        let missed = m.sleep.as_ref().map(|x| x.missed).unwrap_or(0);
        s += &format!(
            "[{vm}]   vcpu{}: sleep wake latency {}, {missed} missed\n",
            m.vcpu,
            latency(l)
        );
    }
    if let (Some(p), Some(rate)) = (&m.pingpong, m.roundtrips_per_s) {
        s += &format!(
            "[{vm}]   vcpu{}: pingpong with vcpu{}: {} round trips, {rate:.0}/s\n",
            m.vcpu, p.partner, p.roundtrips
        );
    }
    if let (Some(l), Some(rate)) = (&m.spinlock, m.acquisitions_per_s) {
        s += &format!(
            "[{vm}]   vcpu{}: spinlock {} acquisitions, {rate:.0}/s, wait {}\n",
            m.vcpu,
            l.acquisitions,
            l.wait_ns
                .as_ref()
                .map(latency)
                .unwrap_or_else(|| format!("max {} ns", l.max_wait_ns))
        );
    }
    if let (Some(b), Some(rate)) = (&m.barrier, m.rounds_per_s) {
        s += &format!(
            "[{vm}]   vcpu{}: barrier of {}: {} rounds, {rate:.0}/s, spinning {:.1} %\n",
            m.vcpu,
            b.participants,
            b.rounds,
            b.spin_share.unwrap_or(0.0) * 100.0
        );
    }
    if let Some(d) = &m.shootdown {
        s += &match (d.initiator, m.shootdowns_per_s) {
            (true, Some(rate)) => format!(
                "[{vm}]   vcpu{}: shootdown to {} siblings: {} round trips, {rate:.0}/s, {}\n",
                m.vcpu,
                d.peer,
                d.count,
                d.latency_ns.as_ref().map(latency).unwrap_or_default()
            ),
            _ => format!(
                "[{vm}]   vcpu{}: shootdown: {} acknowledgements to vcpu{}\n",
                m.vcpu, d.count, d.peer
            ),
        };
    }
    if let Some(sv) = &m.server {
        s += &format!(
            "[{vm}]   vcpu{}: server {} requests ({}/s), {} offered, {} dropped, request latency {}\n",
            m.vcpu,
            sv.requests,
            m.requests_per_s.map_or("-".into(), units::number),
            sv.offered,
            sv.dropped,
            sv.request_latency_ns
                .as_ref()
                .map(latency)
                .unwrap_or_else(|| "-".into())
        );
    }
    if let Some(b) = &m.burst {
        s += &format!(
            "[{vm}]   vcpu{}: burst run fraction {:.3}, {} bursts, {} missed{}\n",
            m.vcpu,
            b.run_fraction,
            b.bursts,
            b.missed,
            b.wake_latency_ns
                .as_ref()
                .map(|l| format!(", wake latency {}", latency(l)))
                .unwrap_or_default()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: RecordKind, vcpu: u32, values: [u64; 5]) -> ResultRecord {
        ResultRecord {
            kind,
            vcpu,
            seq: 0,
            tsc: 0,
            values,
            text: None,
        }
    }

    #[test]
    fn a_long_run_keeps_the_first_records_and_folds_them_all() {
        // More records than are kept, from two vCPUs, as an hour-long VM
        // sends them: what the results report must not depend on the cap.
        let mut log = ResultsLog::create("long", 1000, None).unwrap();
        let mut all: Vec<(u32, ResultRecord)> = Vec::new();
        let n = RECORDS_KEPT as u64 + 1000;
        for i in 0..n {
            let vcpu = (i % 2) as u32;
            let r = rec(RecordKind::WorkSample, vcpu, [i, 1000, i * 10, 1000 + i, 0]);
            let t = i as f64; // one per ms: far below the rate limit
            assert!(log.record(vcpu, r.clone(), t, t));
            all.push((vcpu, r));
        }
        let done = rec(RecordKind::WorkDone, 0, [7, 70, 0, 0, 0]);
        let late_sample = rec(RecordKind::WorkSample, 0, [0, 0, 9, 90, 0]);
        let error = rec(RecordKind::Error, 1, [1, 0, 0, 0, 0]);
        for (i, r) in [done, late_sample, error].into_iter().enumerate() {
            let t = (n + i as u64) as f64;
            assert!(log.record(r.vcpu, r.clone(), t, t));
            all.push((r.vcpu, r));
        }
        assert_eq!(log.records.len(), RECORDS_KEPT);
        assert_eq!(log.records_not_kept, 1003);
        assert_eq!(
            log.records[0].record.values[0], 0,
            "the first ones are kept"
        );
        // The metrics and the work are those of every record.
        assert_eq!(
            log.vcpu_metrics(),
            crate::guest_metrics::vcpu_metrics(all.iter().map(|(v, r)| (*v, r)), 1000)
        );
        let work = log.work();
        assert_eq!(work.len(), 2);
        assert!(
            work[0].done && work[0].units == 7,
            "WORK_DONE outlives a later sample: {work:?}"
        );
        assert_eq!((work[1].units, work[1].ticks), ((n - 1) * 10, 1000 + n - 1));
        let errors = log.guest_errors();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].vcpu, 1);
        assert_eq!(log.milestones().first_result_ms, Some(0.0));
    }

    #[test]
    fn a_flood_is_rate_limited_and_capped_with_dropped_lines() {
        let dir = std::env::temp_dir().join(format!("pacer-results-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.results.jsonl");
        let mut log = ResultsLog::create("f", 1000, Some(&p))
            .unwrap()
            .with_limits(LogLimits {
                log_bytes: 20_000,
                records_per_s: 100,
            });
        // 10 000 records in 1 s: a bucket of 100 at once, then about 100
        // more over the second, until the 20 000-byte cap.
        let mut admitted = 0;
        for i in 0..10_000u64 {
            let t = i as f64 / 10.0;
            admitted +=
                u32::from(log.record(0, rec(RecordKind::WorkSample, 0, [i, 1, 1, 1, 0]), t, t));
        }
        assert!((100..=201).contains(&admitted), "{admitted}");
        let (rate, size) = log.dropped();
        assert_eq!(rate + size + u64::from(admitted), 10_000);
        assert!(size > 0 && rate > 0, "{rate} {size}");
        assert_eq!(
            log.records.len(),
            admitted as usize,
            "dropped records are not kept"
        );
        log.stopped("triple_fault", false, "", 1000.0);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.len() < 20_000 + 2_000, "{}", text.len());
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let dropped: Vec<&serde_json::Value> =
            lines.iter().filter(|l| l["type"] == "dropped").collect();
        assert_eq!(dropped.len(), 2, "the first refusal and the totals");
        assert!(dropped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("100 result records per second"));
        assert_eq!(dropped[1]["rate_limited"], rate);
        assert_eq!(dropped[1]["over_limit"], size);
        assert_eq!(
            lines.last().unwrap()["type"],
            "stop",
            "the stop line is always written"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn jsonl_and_summary() {
        let dir = std::env::temp_dir().join(format!("pacer-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.results.jsonl");
        let mut log = ResultsLog::create("a", 1000, Some(&p)).unwrap();
        log.marker(0, Marker::FirstInstruction, 5.0, 7.0);
        log.record(
            0,
            rec(RecordKind::WorkSample, 0, [10, 1000, 10, 1000, 0]),
            6.0,
            8.0,
        );
        log.record(
            0,
            rec(RecordKind::WorkDone, 0, [50, 5000, 0, 0, 0]),
            9.0,
            11.0,
        );
        log.rejected(0, &RecordError::BadMagic(1), 10.0);
        log.stopped("success", true, "", 12.0);
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[0]["type"], "start");
        assert_eq!(lines[0]["schema"], "pacer-vm-events");
        assert_eq!(lines[2]["kind"], "work_sample");
        assert_eq!(lines[2]["data"]["units"], 10);
        assert_eq!(lines[2]["t_ns"], 6_000_000);
        assert_eq!(lines[5]["message"], serde_json::Value::Null);
        assert_eq!(lines[5]["vcpus"][0]["guest"]["cpu"]["units_per_s"], 10000.0);
        let m = log.milestones();
        assert_eq!(m.first_instruction_ms, Some(5.0));
        assert_eq!(m.first_result_ms, Some(6.0));
        let w = log.work();
        assert_eq!(w.len(), 1);
        assert!(w[0].done);
        assert_eq!(w[0].units_per_s, Some(10000.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
