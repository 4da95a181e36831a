//! Runs a matrix: the cells one after another in their interleaved order,
//! each recorded as soon as it ends, and the summary, plots and report at
//! the end.
//!
//! A Pacer cell is one in-memory `Config` run through the library
//! (`runner::run`) in this process: the VMs of a cell are already isolated
//! from each other by the runner, and each VM's timeout (the cell's limit)
//! stops it. A QEMU cell runs QEMU processes (`qemu.rs`). A failing or
//! timed-out cell is recorded with its error and the run goes on; SIGINT or
//! SIGTERM stop the cell in progress (not recorded) and end the run, which
//! `--resume` continues.
//!
//! `n/a` cells are recorded with their reason without booting anything:
//! reasons known from the matrix (`Cell::static_na`), the QEMU peer's
//! (no PVH entry, no QEMU), and workloads the guest image turned out not
//! to implement — the first cell whose guest answers UNKNOWN_WORKLOAD
//! marks every later cell with that workload kind.

use super::cells::{self, Cell, VmBoot};
use super::host_facts::HostFacts;
use super::matrix::{Matrix, Runner};
use super::metrics::{self, VmMeta};
use super::native::{self, NativeRun};
use super::procs::ProcOutcome;
use super::qemu::{qemu_boots, QemuPeer, QemuVm};
use super::settings;
use super::shard::{self, ShardSpec};
use super::store::{CellRecord, CellStatus, Store, StoreError};
use super::workload::WorkloadKind;
use super::{plots, report, summary::Summary};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use vmm::runner::{self, RunEvent, RunOptions};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum RunMatrixError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("stopped by {0}; finished cells are kept, continue with --resume")]
    Interrupted(&'static str),
    #[error("report: {0}")]
    Report(String),
    /// `--resume` with a matrix that changed what finished cells ran.
    #[error("{0}")]
    Changed(String),
}

/// Options of a bench run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub out: PathBuf,
    /// Keep the finished cells of an earlier run in `out` and run the rest.
    pub resume: bool,
    /// The part of the matrix to run (`ShardSpec::WHOLE`: all of it).
    pub shard: ShardSpec,
    /// The cells of that part to run now (`--only-policy`, `--only-layout`);
    /// the others stay for a later `--resume` of the same part.
    pub only: super::select::Selection,
}

/// What the run reports as it goes (the CLI shows it).
#[derive(Debug)]
pub enum BenchEvent<'a> {
    /// The run starts: cells in all, already done, to run now.
    Start {
        total: usize,
        done: usize,
        estimate_s: f64,
    },
    /// A cell starts (index among the cells to run).
    CellStart {
        index: usize,
        id: &'a str,
    },
    CellDone(&'a CellRecord),
    /// A stop signal arrived; the current cell is abandoned.
    Stopping(&'static str),
    /// Something the user should know (a status line).
    Note(String),
}

/// The outcome of a run.
#[derive(Debug)]
pub struct BenchOutcome {
    pub summary: Summary,
    /// Cells that failed or timed out (this run and earlier ones).
    pub failed: usize,
    pub report: PathBuf,
    /// Why the plots were left out, if they were.
    pub plots_skipped: Option<String>,
}

/// The signals that stop a bench run.
fn stop_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local sigset; the signals are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
    }
    set
}

/// A SIGINT or SIGTERM that arrived while no cell was listening (they are
/// blocked for the whole run, see [`run_matrix`]), taken without waiting.
fn take_stop_signal() -> Option<&'static str> {
    let set = stop_set();
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid sigset and timespec; siginfo may be null.
    match unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) } {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    }
}

/// For a cell of child processes: a stop signal arrived (now or before).
fn stop_requested(interrupted: &AtomicBool) -> bool {
    if take_stop_signal().is_some() {
        interrupted.store(true, Ordering::Release);
    }
    interrupted.load(Ordering::Acquire)
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// State shared by the cells of one run.
struct Ctx<'a> {
    m: &'a Matrix,
    out: &'a Path,
    qemu: Option<Result<QemuPeer, String>>,
    /// Whether QEMU boots each guest image (checked once per image).
    qemu_images: HashMap<PathBuf, Result<(), String>>,
    /// Workload kinds the guest image answered UNKNOWN_WORKLOAD to.
    unsupported: HashMap<WorkloadKind, String>,
    /// This host, recorded with every cell (the load at its start).
    host: HostFacts,
}

impl Ctx<'_> {
    fn kinds(&self, cell: &Cell) -> Vec<WorkloadKind> {
        let mut k: Vec<WorkloadKind> = self.m.layouts[cell.layout]
            .vms
            .iter()
            .map(|v| self.m.workloads[v.workload.unwrap_or(cell.workload)].kind)
            .collect();
        k.sort();
        k.dedup();
        k
    }

    fn record(&self, cell: &Cell, status: CellStatus, error: String) -> CellRecord {
        let mode = match self.m.policies[cell.policy].runner {
            Runner::Pacer { policy, mode, .. } if policy.uses_mode() => {
                Some(mode.as_str().to_string())
            }
            _ => None,
        };
        CellRecord {
            header: vmm::documents::Header::new(vmm::documents::BENCH_CELL),
            id: cell.id(self.m),
            layout: self.m.layouts[cell.layout].name.clone(),
            workload: self.m.workloads[cell.workload].name.clone(),
            policy: self.m.policies[cell.policy].label.clone(),
            mode,
            rep: cell.rep,
            status,
            error,
            started_unix_ns: unix_ns(),
            wall_ns: 0,
            samples: Vec::new(),
            host: Some(self.host.with_current_load()),
        }
    }

    fn meta(&self, cell: &Cell) -> BTreeMap<String, VmMeta> {
        self.m.layouts[cell.layout]
            .vms
            .iter()
            .map(|v| {
                (
                    v.name.clone(),
                    VmMeta {
                        group: v.group.clone(),
                        priority: v.priority,
                    },
                )
            })
            .collect()
    }

    /// Why `cell` cannot run, if known before running it.
    fn not_applicable(&mut self, cell: &Cell) -> Option<String> {
        if let Some(why) = cell.static_na(self.m) {
            return Some(why);
        }
        if let Some(why) = self
            .kinds(cell)
            .iter()
            .find_map(|k| self.unsupported.get(k))
        {
            return Some(why.clone());
        }
        if self.m.policies[cell.policy].runner == Runner::Qemu {
            let peer = self.qemu.get_or_insert_with(QemuPeer::detect);
            if let Err(why) = peer {
                return Some(why.clone());
            }
            for i in 0..self.m.layouts[cell.layout].vms.len() {
                let image = match cells::vm_boot(self.m, cell, i) {
                    VmBoot::Bench { kernel, .. } => kernel,
                    VmBoot::Linux { suite, .. } => suite.kernel,
                };
                let boots = self
                    .qemu_images
                    .entry(image)
                    .or_insert_with_key(|image| qemu_boots(image));
                if let Err(why) = boots {
                    return Some(why.clone());
                }
            }
        }
        None
    }

    fn learn_unsupported(&mut self, vm_workloads: &[WorkloadKind]) -> String {
        let why = |k: WorkloadKind| {
            format!(
                "the guest image does not implement workload \"{k}\": it answered UNKNOWN_WORKLOAD"
            )
        };
        for &k in vm_workloads {
            self.unsupported.insert(k, why(k));
        }
        vm_workloads.first().map(|&k| why(k)).unwrap_or_default()
    }

    /// Where a cell's scheduling trace goes (matrix `trace = true`).
    pub fn trace_path(&self, cell: &Cell) -> PathBuf {
        self.out
            .join("traces")
            .join(format!("{}.trace", cell.dir_name(self.m)))
    }

    /// Run one Pacer cell.
    fn run_pacer(&mut self, cell: &Cell, interrupted: &AtomicBool) -> Option<CellRecord> {
        let log_dir = self.out.join("logs").join(cell.dir_name(self.m));
        let config = cells::pacer_config(self.m, cell, &log_dir)?;
        let mut rec = self.record(cell, CellStatus::Ok, String::new());
        let start = Instant::now();
        // SIGINT/SIGTERM: the runner stops the VMs; the cell is abandoned.
        let on_event = |ev: RunEvent<'_>| {
            if let RunEvent::Stopping(_) = ev {
                interrupted.store(true, Ordering::Release);
            }
        };
        let trace = (self.m.trace && config.host.policy != vmm::policy::Policy::Host)
            .then(|| self.trace_path(cell));
        let opts = RunOptions {
            run_start: start,
            status: false,
            trace,
            api: Default::default(),
        };
        let result = runner::run(&config, &opts, &on_event);
        rec.wall_ns = start.elapsed().as_nanos() as u64;
        if interrupted.load(Ordering::Acquire) {
            return None;
        }
        let results = match result {
            Ok(r) => r,
            Err(e) => {
                rec.status = CellStatus::Failed;
                rec.error = e.to_string();
                return Some(rec);
            }
        };
        let layout = &self.m.layouts[cell.layout];
        let mut errors = Vec::new();
        let mut refused = Vec::new();
        let mut timeout = false;
        for (i, (vm, spec)) in results.vms.iter().zip(&layout.vms).enumerate() {
            rec.samples.extend(metrics::vm_samples(vm, &spec.group));
            if let Some(suite) = &cells::vm_workload(self.m, cell, i).suite {
                // A Linux VM's results are the suite's lines on its console.
                let console = vm
                    .console_log
                    .as_ref()
                    .and_then(|p| {
                        vmm::input::read_lossy(p, vmm::input::MAX_LOG_BYTES, "a console log").ok()
                    })
                    .unwrap_or_default();
                match suite.samples(&console, &vm.name, &spec.group, spec.vcpus) {
                    Ok(samples) => rec.samples.extend(samples),
                    Err(missing) if vm.ok => errors.push(format!("vm {}: {missing}", vm.name)),
                    Err(_) => {} // the VM's own failure below says more
                }
            }
            let kind = cells::vm_workload(self.m, cell, i).kind;
            if metrics::unknown_workload(vm) {
                refused.push(kind);
            }
            if let Some(end) = kind.expected_end() {
                if vm.status == end {
                    rec.samples.push(metrics::Sample {
                        vm: vm.name.clone(),
                        group: spec.group.clone(),
                        vcpu: None,
                        metric: metrics::CONTAINED.into(),
                        value: 1.0,
                    });
                } else {
                    timeout |= vm.status == "timeout";
                    errors.push(format!(
                        "vm {}: a {kind} guest ends in {end}, this one ended {} ({})",
                        vm.name, vm.status, vm.message
                    ));
                }
            } else if !vm.ok {
                timeout |= vm.status == "timeout";
                errors.push(format!("vm {}: {} ({})", vm.name, vm.status, vm.message));
            }
        }
        // What co-scheduling did, in a cell where a VM asked for it.
        if let (true, Some(cpus)) = (
            layout
                .vms
                .iter()
                .any(|v| v.coschedule != vcpu_sched::Coschedule::Off),
            &results.sched_cpus,
        ) {
            rec.samples.extend(metrics::cosched_samples(cpus));
        }
        errors.extend((!errors.is_empty()).then(|| format!("logs in {}", log_dir.display())));
        self.conclude(cell, &mut rec, &refused, &errors, timeout);
        Some(rec)
    }

    /// Run one QEMU cell (the peer is known to be usable); None if a stop
    /// signal ended it.
    fn run_qemu(&mut self, cell: &Cell, interrupted: &AtomicBool) -> Option<CellRecord> {
        let mut rec = self.record(cell, CellStatus::Ok, String::new());
        let Some(Ok(peer)) = self.qemu.clone() else {
            rec.status = CellStatus::NotApplicable;
            rec.error = "QEMU peer unavailable".into();
            return Some(rec);
        };
        let layout = &self.m.layouts[cell.layout];
        let vms: Vec<QemuVm> = layout
            .vms
            .iter()
            .enumerate()
            .map(|(i, v)| QemuVm {
                name: v.name.clone(),
                group: v.group.clone(),
                vcpus: v.vcpus,
                memory_mib: v.memory_mib,
                cpus: v.cpus.clone(),
                boot: cells::vm_boot(self.m, cell, i),
            })
            .collect();
        let dir = self.out.join("logs").join(cell.dir_name(self.m));
        let start = Instant::now();
        let stop = || stop_requested(interrupted);
        let outcome = peer
            .run_vms(&vms, &dir, self.m.cell_timeout, &stop)
            .map_err(|e| e.to_string());
        rec.wall_ns = start.elapsed().as_nanos() as u64;
        if interrupted.load(Ordering::Acquire) {
            return None;
        }
        self.judge(cell, &mut rec, outcome);
        Some(rec)
    }

    /// Run one native cell (the suite on the host); None if a stop signal
    /// ended it.
    fn run_native(&mut self, cell: &Cell, interrupted: &AtomicBool) -> Option<CellRecord> {
        let mut rec = self.record(cell, CellStatus::Ok, String::new());
        let layout = &self.m.layouts[cell.layout];
        // static_na made sure every VM runs the suite.
        let runs: Vec<NativeRun> = layout
            .vms
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                Some(NativeRun {
                    name: v.name.clone(),
                    group: v.group.clone(),
                    vcpus: v.vcpus,
                    cpus: v.cpus.clone(),
                    suite: cells::vm_workload(self.m, cell, i).suite.clone()?,
                })
            })
            .collect();
        let dir = self.out.join("logs").join(cell.dir_name(self.m));
        let start = Instant::now();
        let stop = || stop_requested(interrupted);
        let outcome =
            native::run(&runs, &dir, self.m.cell_timeout, &stop).map_err(|e| e.to_string());
        rec.wall_ns = start.elapsed().as_nanos() as u64;
        if interrupted.load(Ordering::Acquire) {
            return None;
        }
        self.judge(cell, &mut rec, outcome);
        Some(rec)
    }

    /// Fill `rec` from the outcomes of a cell's processes (QEMU, native).
    fn judge(
        &mut self,
        cell: &Cell,
        rec: &mut CellRecord,
        outcome: Result<Vec<ProcOutcome>, String>,
    ) {
        let layout = &self.m.layouts[cell.layout];
        let outcomes = match outcome {
            Ok(o) => o,
            Err(e) => {
                rec.status = CellStatus::Failed;
                rec.error = e;
                return;
            }
        };
        let mut refused = Vec::new();
        let mut errors = Vec::new();
        let mut timeout = false;
        for (o, spec) in outcomes.into_iter().zip(&layout.vms) {
            rec.samples.extend(o.samples);
            if o.unknown_workload {
                refused.push(self.m.workloads[spec.workload.unwrap_or(cell.workload)].kind);
            }
            timeout |= o.timed_out;
            errors.extend(o.error);
        }
        self.conclude(cell, rec, &refused, &errors, timeout);
    }

    /// The cell-wide samples and the cell's status: `n/a` if a guest
    /// refused its workload, failed or timed out on errors, else ok.
    fn conclude(
        &mut self,
        cell: &Cell,
        rec: &mut CellRecord,
        refused: &[WorkloadKind],
        errors: &[String],
        timeout: bool,
    ) {
        rec.samples
            .extend(metrics::cell_samples(&rec.samples, &self.meta(cell)));
        if !refused.is_empty() {
            rec.status = CellStatus::NotApplicable;
            rec.error = self.learn_unsupported(refused);
            rec.samples.clear();
        } else if !errors.is_empty() {
            rec.status = if timeout {
                CellStatus::Timeout
            } else {
                CellStatus::Failed
            };
            rec.error = errors.join("; ");
        }
    }
}

/// Rough wall time of the cells still to run (for the first ETA): the
/// longest VM of each cell (the suite's own estimate for a Linux VM).
fn estimate_s(m: &Matrix, cells: &[Cell]) -> f64 {
    cells
        .iter()
        .map(|c| {
            let longest = (0..m.layouts[c.layout].vms.len())
                .map(|i| {
                    let w = cells::vm_workload(m, c, i);
                    match &w.suite {
                        Some(suite) => suite.estimate_s(m.layouts[c.layout].vms[i].vcpus),
                        None => w.duration_ms() as f64 / 1e3,
                    }
                })
                .fold(0.0, f64::max);
            longest + 0.1
        })
        // Not `sum`: the sum of no f64s is -0.0, printed "-0".
        .fold(0.0, |a, b| a + b)
}

/// Run every cell of `m` not yet in `opts.out`, then write the summary,
/// plots and report there.
pub fn run_matrix(
    m: &Matrix,
    opts: &BenchOptions,
    on_event: &mut dyn FnMut(BenchEvent<'_>),
) -> Result<BenchOutcome, RunMatrixError> {
    // SIGINT and SIGTERM stay blocked for the whole run (in every thread it
    // starts): a Pacer cell's runner takes them while it runs, a QEMU cell
    // polls for them, and between cells they are looked for after each one.
    let _signals = vmm::signals::SignalGuard::install();
    let all = opts.shard.select(&cells::expand(m));
    let view = crate::documents::matrix::MatrixView::of(m);
    let settings: HashMap<String, settings::CellSettings> = all
        .iter()
        .map(|c| (c.id(m), settings::of(m, &view, c)))
        .collect();
    // A resume that is refused touches nothing: the finished cells are
    // checked against the matrix before the store repairs or rewrites
    // anything.
    let part = shard::ShardDoc::new(m, shard::matrix_digest(m), opts.shard, all.len());
    if opts.resume {
        let (finished, _) = super::store::read_jsonl(&opts.out.join(super::store::JSONL))?;
        let recorded = shard::read(&opts.out).map_err(RunMatrixError::Changed)?;
        shard::check_resume(&opts.out, recorded.as_ref(), finished.len(), &part)
            .map_err(RunMatrixError::Changed)?;
        check_resume(m, &finished, &settings, &opts.out)?;
        matrix_copy_readable(&opts.out)?;
    }
    let mut store = Store::open(&opts.out, opts.resume)?;
    shard::write(&opts.out, &part).map_err(RunMatrixError::Report)?;
    keep_matrix_text(m, &opts.out, on_event)?;
    let todo: Vec<Cell> = all
        .iter()
        .copied()
        .filter(|c| opts.only.contains(c) && !store.is_done(&c.id(m)))
        .collect();
    let selected = all.iter().filter(|c| opts.only.contains(c)).count();
    on_event(BenchEvent::Start {
        total: selected,
        done: selected - todo.len(),
        estimate_s: estimate_s(m, &todo),
    });
    let mut ctx = Ctx {
        m,
        out: &opts.out,
        qemu: None,
        qemu_images: HashMap::new(),
        unsupported: HashMap::new(),
        host: HostFacts::detect(),
    };
    let interrupted = AtomicBool::new(false);
    for (index, cell) in todo.iter().enumerate() {
        let id = cell.id(m);
        on_event(BenchEvent::CellStart { index, id: &id });
        let rec = match ctx.not_applicable(cell) {
            Some(why) => Some(ctx.record(cell, CellStatus::NotApplicable, why)),
            None => {
                let window = super::host_facts::CellWindow::start();
                let rec = match m.policies[cell.policy].runner {
                    Runner::Qemu => ctx.run_qemu(cell, &interrupted),
                    Runner::Native => ctx.run_native(cell, &interrupted),
                    Runner::Pacer { .. } => ctx.run_pacer(cell, &interrupted),
                };
                rec.map(|mut r| {
                    if let Some(host) = r.host.as_mut() {
                        window.finish(host);
                    }
                    r
                })
            }
        };
        let Some(rec) = rec else {
            on_event(BenchEvent::Stopping("a stop signal"));
            finish(m, &store, &ctx)?;
            return Err(RunMatrixError::Interrupted(
                "a stop signal (SIGINT/SIGTERM)",
            ));
        };
        // What the cell ran, then its record (--resume checks the one
        // against the matrix before trusting the other).
        if let Some(cs) = settings.get(&id) {
            settings::append(&opts.out, cs).map_err(|source| StoreError::Io {
                path: opts.out.join(settings::FILE),
                source,
            })?;
        }
        store.append(rec)?;
        if let Some(last) = store.records().last() {
            on_event(BenchEvent::CellDone(last));
        }
        if let Some(sig) = take_stop_signal() {
            on_event(BenchEvent::Stopping(sig));
            finish(m, &store, &ctx)?;
            return Err(RunMatrixError::Interrupted(
                "a stop signal (SIGINT/SIGTERM)",
            ));
        }
    }
    finish(m, &store, &ctx)
}

/// On `--resume`: refuse if a finished cell ran with other settings than
/// the matrix gives it now (naming the cells and the keys that changed),
/// or if nothing shows what it ran (`cell-settings.jsonl` missing, or
/// without the cell's line): the finished cells must be proven to belong
/// to this matrix, never assumed to.
fn check_resume(
    m: &Matrix,
    finished: &[CellRecord],
    now: &HashMap<String, settings::CellSettings>,
    out: &Path,
) -> Result<(), RunMatrixError> {
    if finished.is_empty() {
        return Ok(());
    }
    let file = out.join(settings::FILE);
    let jsonl = out.join(super::store::JSONL);
    let Some(ran) = settings::read(out).map_err(RunMatrixError::Changed)? else {
        return Err(RunMatrixError::Changed(format!(
            "--resume: {} is missing (an output folder of an older Pacer, or the file was deleted), so nothing shows that the {} finished cell(s) in {} ran {}; run the matrix into another --out-dir (or continue this folder with the Pacer that wrote it)",
            file.display(),
            finished.len(),
            jsonl.display(),
            m.path.display()
        )));
    };
    let unproven: Vec<&str> = finished
        .iter()
        .filter(|r| !ran.contains_key(&r.id))
        .map(|r| r.id.as_str())
        .collect();
    if !unproven.is_empty() {
        let shown = unproven.iter().take(3).copied().collect::<Vec<_>>();
        let more = if unproven.len() > 3 {
            format!(" and {} more", unproven.len() - 3)
        } else {
            String::new()
        };
        return Err(RunMatrixError::Changed(format!(
            "--resume: {} has no settings for {} finished cell(s) of {} ({}{more}), so nothing shows they ran {}; run the matrix into another --out-dir",
            file.display(),
            unproven.len(),
            jsonl.display(),
            shown.join(", "),
            m.path.display()
        )));
    }
    let mut changed = Vec::new();
    for r in finished {
        let (Some(old), Some(new)) = (ran.get(&r.id), now.get(&r.id)) else {
            continue;
        };
        if old.digest != new.digest {
            changed.push(format!(
                "{} ({})",
                r.id,
                settings::differences(&old.settings, &new.settings, 4)
            ));
        }
    }
    if changed.is_empty() {
        return Ok(());
    }
    let n = changed.len();
    let shown = changed
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    let more = if n > 3 {
        format!("; and {} more cell(s)", n - 3)
    } else {
        String::new()
    };
    Err(RunMatrixError::Changed(format!(
        "--resume: {} finished cell(s) of {} ran with other settings than {} gives them now: {shown}{more}; run the changed matrix into another --out-dir (or restore the matrix to continue)",
        n,
        out.display(),
        m.path.display()
    )))
}

/// On `--resume`: the first run's `matrix.toml`, if there is one, must be
/// a file that can be read (a FIFO or a device there is refused, never
/// written to).
fn matrix_copy_readable(out: &Path) -> Result<(), RunMatrixError> {
    let first = out.join("matrix.toml");
    match vmm::input::read_config_text(&first, "a matrix") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RunMatrixError::Changed(format!(
            "--resume: cannot read {}: {e}",
            first.display()
        ))),
    }
}

/// Keep the matrix file in `out` as `matrix.toml`; on a resume whose
/// matrix text differs (comments, more repetitions: the finished cells'
/// settings were checked), the first run's file is kept and this one is
/// saved beside it as `matrix.<n>.toml`.
fn keep_matrix_text(
    m: &Matrix,
    out: &Path,
    on_event: &mut dyn FnMut(BenchEvent<'_>),
) -> Result<(), RunMatrixError> {
    let text = vmm::input::read_config_text(&m.path, "a matrix").unwrap_or_default();
    let first = out.join("matrix.toml");
    let kept = vmm::input::read_config_text(&first, "a matrix").ok();
    let target = match kept {
        None => first,
        Some(k) if k == text => return Ok(()),
        Some(_) => {
            let free = (2..)
                .map(|n| out.join(format!("matrix.{n}.toml")))
                .find(|p| !p.exists())
                .unwrap_or_else(|| out.join("matrix.resumed.toml"));
            on_event(BenchEvent::Note(format!(
                "the matrix differs from {}: kept it, this run's matrix is {}",
                out.join("matrix.toml").display(),
                free.display()
            )));
            free
        }
    };
    vmm::whole_file::write(&target, text)
        .map_err(|e| RunMatrixError::Report(format!("{}: {e}", target.display())))
}

/// Summary, plots and report from what the store holds.
fn finish(m: &Matrix, store: &Store, ctx: &Ctx<'_>) -> Result<BenchOutcome, RunMatrixError> {
    let qemu_version = match &ctx.qemu {
        Some(Ok(p)) => Some(p.version.clone()),
        _ => None,
    };
    write_outputs(m, store.records(), store.dir(), qemu_version, None)
}

/// summary.json, plots and report.html in `dir` from `records` (a run's,
/// or a merge's: then `hosts` shows its hosts side by side, and the
/// records' layouts are `layout @ host` when there are several).
pub(crate) fn write_outputs(
    m: &Matrix,
    records: &[CellRecord],
    dir: &Path,
    qemu_version: Option<String>,
    hosts: Option<&super::hosts::Hosts>,
) -> Result<BenchOutcome, RunMatrixError> {
    let order: Vec<String> = m.policies.iter().map(|p| p.label.clone()).collect();
    let headline = |layout: &str, workload: &str| {
        let layout = super::hosts::base_layout(layout);
        let li = m.layouts.iter().position(|l| l.name == layout)?;
        let wi = m.workloads.iter().position(|w| w.name == workload)?;
        Some(super::headline::resolve(m, li, wi))
    };
    let mut summary = Summary::build(records, &order, &m.baselines, &headline);
    summary.matrix = Some(crate::documents::matrix::MatrixView::of(m));
    let json =
        serde_json::to_string_pretty(&crate::documents::summary::SummaryDocument::of(&summary))
            .unwrap_or_default();
    vmm::whole_file::write(&dir.join("summary.json"), json + "\n")
        .map_err(|e| RunMatrixError::Report(format!("summary.json: {e}")))?;
    let plots = plots::write_all(&summary, records, &dir.join("plots"));
    let hosts_html = hosts.map(|h| h.html(&summary));
    let report = report::write_with_hosts(
        m,
        &summary,
        records,
        &plots,
        qemu_version,
        hosts_html.as_deref(),
        dir,
    )
    .map_err(|e| RunMatrixError::Report(e.to_string()))?;
    let failed = records
        .iter()
        .filter(|r| matches!(r.status, CellStatus::Failed | CellStatus::Timeout))
        .count();
    Ok(BenchOutcome {
        summary,
        failed,
        report,
        plots_skipped: plots.skipped,
    })
}
