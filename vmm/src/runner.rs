//! Runs many VMs in one process: one controller thread per VM (named
//! `<vm>/ctl`) creates it, runs it to completion and returns its result; a
//! failing VM never stops the others. The runner prints nothing: it
//! reports through [`RunEvent`]s to its caller (the CLI prints them).
//! With [`RunOptions::api`] it also serves the control API (`crate::api`)
//! on a thread of its own (`pacer/api`) for as long as the VMs run.

use crate::config::Config;
use crate::policy::Policy;
use crate::results::{RunResults, VmResult};
use crate::signals::{ProcessSignal, SignalGuard, StopAction, StopSignals};
use crate::stop_registry::StopRegistry;
use crate::vm::{open_kvm, VcpuScheduling, Vm, VmOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vcpu_engine::cpu_map::CpuMap;
use vcpu_engine::{Engine, EngineConfig, EngineError};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start the scheduled engine: {0}")]
    Engine(#[from] EngineError),
    #[error("host topology: {0}")]
    Topology(#[from] vcpu_sched::SchedError),
    #[error("{0}")]
    Kvm(#[from] crate::vm::VmError),
    #[error("{0}")]
    LogDir(#[from] crate::run_dir::RunDirError),
    #[error("{0}")]
    Trace(#[from] vcpu_engine::trace::tracer::TraceError),
    #[error("--trace: policy host leaves the vCPU threads to the host kernel; Pacer has no scheduling to record (use haiku, global-rr or pinned)")]
    TraceUnderHost,
    /// The control API cannot listen where it was asked to (bad input).
    #[error("{0}")]
    Api(#[from] crate::api::ApiError),
    #[error("cannot start the API thread: {0}")]
    ApiThread(std::io::Error),
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// When the run started (process start for `pacer run`).
    pub run_start: Instant,
    /// Report a one-line status every second ([`RunEvent::Status`]).
    pub status: bool,
    /// Record a scheduling trace into this file (scheduled policies).
    pub trace: Option<std::path::PathBuf>,
    /// Serve the control API (`--api-socket`, `--api-http`).
    pub api: crate::api::ApiOptions,
}

/// What the runner reports while it runs.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// A VM finished (successfully or not).
    VmFinished(&'a VmResult),
    /// SIGINT/SIGTERM arrived; every VM is being stopped.
    Stopping(&'static str),
    /// The once-a-second status line (with `RunOptions::status`).
    Status(String),
    /// SIGUSR1: the scheduler's snapshot was written here (or why not).
    Snapshot(Result<std::path::PathBuf, SnapshotError>),
    /// The control API listens (before any VM starts): its socket, and
    /// the address of the live page on TCP if one was asked for.
    ApiReady {
        socket: Option<&'a std::path::Path>,
        page: Option<std::net::SocketAddr>,
    },
}

/// Successive status lines from the engine's counters.
struct StatusLine {
    start: Instant,
    last: Option<(u64, u64, u64, u64)>,
}

impl StatusLine {
    fn next(&mut self, engine: Option<&Engine>, policy: Policy, vms_left: usize) -> String {
        let t = self.start.elapsed().as_secs_f64();
        let Some(engine) = engine else {
            return format!("t={t:.1}s policy host: {vms_left} VM(s) running");
        };
        let snap = engine.snapshot();
        let busy: u64 = snap.cpus.iter().map(|c| c.busy_time).sum();
        let switches: u64 = snap.cpus.iter().map(|c| c.context_switches).sum();
        let wakes: u64 = snap.entities.iter().map(|e| e.wakes).sum();
        let now = snap.now;
        let c = engine.census();
        let rates = match self.last.replace((now, busy, switches, wakes)) {
            Some((t0, b0, s0, w0)) if now > t0 => {
                let dt = (now - t0) as f64 / 1e9;
                format!(
                    " | CPUs busy {:.0}% | {:.0} switches/s | {:.0} wakeups/s",
                    100.0 * (busy - b0) as f64 / 1e9 / dt / snap.cpus.len().max(1) as f64,
                    (switches - s0) as f64 / dt,
                    (wakes - w0) as f64 / dt
                )
            }
            _ => String::new(),
        };
        let mut out = format!(
            "t={t:.1}s policy {policy}: {} VM(s) | vCPUs running {} ready {} halted {} other {}{rates}",
            c.vms, c.running, c.ready, c.halted, c.other
        );
        // Then one line per vCPU: where it is and why it waits.
        for v in engine.vcpus_now(&snap) {
            out.push('\n');
            out.push_str(&v.line());
        }
        out
    }
}

/// Why no scheduler snapshot was written (SIGUSR1).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("policy host has no scheduler snapshot")]
    NoScheduler,
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{}: {source}", .path.display())]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Write the scheduler's snapshot to `<log_dir>/sched-snapshot-<ms>.json`.
fn write_snapshot(
    engine: Option<&Engine>,
    log_dir: &std::path::Path,
    start: Instant,
) -> Result<std::path::PathBuf, SnapshotError> {
    let engine = engine.ok_or(SnapshotError::NoScheduler)?;
    let snap = engine.snapshot();
    // The vCPUs by VM and index as the scheduler sees them, then as the
    // engine and the interrupt controller do, then the scheduler's whole
    // snapshot (`documents::snapshot`).
    let file = crate::documents::snapshot::SnapshotDocument::new(
        &snap,
        engine.vcpus_now(&snap),
        engine.vcpus_engine_now(),
        start.elapsed().as_nanos() as u64,
    );
    let json = serde_json::to_string_pretty(&file)?;
    let path = log_dir.join(format!(
        "sched-snapshot-{}.json",
        start.elapsed().as_millis()
    ));
    if let Err(source) = crate::whole_file::write(&path, json + "\n") {
        return Err(SnapshotError::Write { path, source });
    }
    Ok(path)
}

/// Run every VM of `config` to completion; `on_event` hears about each VM
/// as it finishes (from the VM's controller thread).
pub fn run(
    config: &Config,
    opts: &RunOptions,
    on_event: &(dyn Fn(RunEvent<'_>) + Sync),
) -> Result<RunResults, RunError> {
    if opts.trace.is_some() && config.host.policy == Policy::Host {
        return Err(RunError::TraceUnderHost);
    }
    let resolved;
    let config = match dispatch_fallback(config) {
        Some(c) => {
            resolved = c;
            &resolved
        }
        None => config,
    };
    // Every check that can refuse the run comes before anything is
    // written: the API's socket and port (a path or port it cannot have is
    // bad input), the trace file, the engine and KVM. Only then is the
    // run's directory created and `latest` pointed at it, so a refused run
    // (a second run on a busy socket) leaves the log directory as it was.
    let listeners = match opts.api.is_enabled() {
        false => None,
        true => Some(crate::api::bind(&opts.api)?),
    };
    // The socket bound above is removed again if the run is refused after.
    let unbind = |listeners: Option<crate::api::Listeners>| {
        if let Some(path) = listeners.as_ref().and_then(|l| l.socket_path()) {
            let _ = std::fs::remove_file(path);
        }
    };
    // Before any thread starts: every thread inherits the blocked mask.
    let guard = SignalGuard::install();
    let guard = &guard;
    let mut tracer = None;
    let started = (|| -> Result<_, RunError> {
        let engine = match config.host.policy {
            Policy::Host => None,
            Policy::Scheduled(policy) => {
                let cpus = CpuMap::from_host(&config.host.cpus)?;
                let mut engine_config = EngineConfig::default();
                engine_config.policy = policy;
                engine_config.mode = config.host.mode;
                engine_config.smt_isolation = config.host.smt_isolation;
                engine_config.tunables = config.host.tunables.clone();
                engine_config.dispatch = config.host.dispatch;
                engine_config.halt_poll_ns = config.host.halt_poll_us * 1000;
                engine_config.kvm_poll_ns = config.host.kvm_poll_us * 1000;
                engine_config.coscheduled_wide = config.coscheduled_wide();
                engine_config.low_latency_named = config.host.low_latency_named;
                if let Some(path) = &opts.trace {
                    let t = vcpu_engine::trace::Tracer::start(
                        &vcpu_engine::trace::TraceConfig::new(path),
                        trace_meta(config, &engine_config, &cpus),
                    )?;
                    engine_config.trace = Some(t.trace());
                    tracer = Some(t);
                }
                Some(Engine::new(engine_config, cpus)?)
            }
        };
        let kvm = open_kvm()?;
        // This run's own directory, before any VM starts.
        let run_dir = crate::run_dir::create(&config.host.log_dir)?;
        Ok((engine, kvm, run_dir))
    })();
    let (engine, kvm, run_dir) = match started {
        Ok(s) => s,
        Err(e) => {
            unbind(listeners);
            // A trace file this run created holds no run: removed.
            if let Some(t) = tracer.take() {
                let path = opts.trace.clone();
                let _ = t.outcome();
                if let Some(path) = path {
                    let _ = std::fs::remove_file(path);
                }
            }
            return Err(e);
        }
    };
    crate::run_dir::keep_config(&run_dir, config);
    let api = match listeners {
        None => None,
        Some(listeners) => {
            let record = run_dir.join("control.jsonl");
            // Appended to (a failed write is cut back to whole lines).
            let file = match std::fs::OpenOptions::new()
                .append(true)
                .create_new(true)
                .open(&record)
            {
                Ok(f) => f,
                Err(source) => {
                    unbind(Some(listeners));
                    return Err(crate::api::ApiError::Record {
                        path: record.clone(),
                        source,
                    }
                    .into());
                }
            };
            let wake = vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK)
                .map_err(RunError::ApiThread)?;
            on_event(RunEvent::ApiReady {
                socket: listeners.socket_path(),
                page: listeners.http_addr(),
            });
            Some((
                listeners,
                crate::api::audit::Audit::new(opts.run_start, Some(file)),
                wake,
            ))
        }
    };
    let scheduling = match &engine {
        None => VcpuScheduling::Host { pin: true },
        Some(e) => VcpuScheduling::Scheduled(e.clone()),
    };
    let scheduling = &scheduling;
    let kvm = &kvm;
    let registry = &StopRegistry::default();
    let done = &AtomicBool::new(false);
    let vms_left = &std::sync::atomic::AtomicUsize::new(config.vms.len());
    let engine_ref = engine.as_deref();
    let log_dir = &run_dir;
    let (api_listeners, api_rest) = match api {
        Some((l, audit, wake)) => (Some(l), Some((audit, wake))),
        None => (None, None),
    };
    let api_rest = &api_rest;
    let results = std::thread::scope(|s| {
        let api_thread = match (api_listeners, api_rest) {
            (Some(listeners), Some((audit, wake))) => {
                let ctx = crate::api::ApiContext {
                    engine: engine_ref,
                    vms: registry,
                    configs: &config.vms,
                    policy: config.host.policy,
                    host_cpus: config.host.cpus.clone(),
                    audit,
                    run_start: opts.run_start,
                };
                match std::thread::Builder::new()
                    .name("pacer/api".into())
                    .spawn_scoped(s, move || crate::api::serve(listeners, &ctx, wake, done))
                {
                    Ok(t) => Some(t),
                    Err(e) => {
                        log::error!("cannot start the API thread: {e}; the run goes on without it");
                        None
                    }
                }
            }
            _ => None,
        };
        if let Some(g) = guard {
            let _ = std::thread::Builder::new()
                .name("pacer/signals".into())
                .spawn_scoped(s, move || {
                    crate::seccomp::install_or_warn(crate::seccomp::ThreadKind::Service);
                    let mut stops = StopSignals::default();
                    g.watch(
                        || done.load(Ordering::Acquire),
                        |sig| match sig {
                            ProcessSignal::Stop(name) => match stops.on_stop(name) {
                                StopAction::StopAll => {
                                    on_event(RunEvent::Stopping(name));
                                    registry.stop_all();
                                }
                                StopAction::ExitNow(status) => {
                                    log::error!(
                                        "{name} again while the VMs stop: exiting now, without waiting for them (what was written so far is kept)"
                                    );
                                    std::process::exit(status);
                                }
                            },
                            ProcessSignal::Snapshot => on_event(RunEvent::Snapshot(
                                write_snapshot(engine_ref, log_dir, opts.run_start),
                            )),
                        },
                    )
                });
        }
        let status = opts.status.then(|| {
            std::thread::Builder::new()
                .name("pacer/status".into())
                .spawn_scoped(s, move || {
                    crate::seccomp::install_or_warn(crate::seccomp::ThreadKind::Service);
                    let mut line = StatusLine {
                        start: opts.run_start,
                        last: None,
                    };
                    let policy = config.host.policy;
                    while !done.load(Ordering::Acquire) {
                        std::thread::park_timeout(std::time::Duration::from_secs(1));
                        if done.load(Ordering::Acquire) {
                            break;
                        }
                        let left = vms_left.load(Ordering::Acquire);
                        on_event(RunEvent::Status(line.next(engine_ref, policy, left)));
                    }
                })
        });
        let handles: Vec<_> = config
            .vms
            .iter()
            .map(|vm| {
                let options = VmOptions {
                    log_dir: Some(run_dir.clone()),
                    scheduling: scheduling.clone(),
                    run_start: opts.run_start,
                    limits: config.host.log_limits,
                };
                std::thread::Builder::new()
                    .name(format!("{}/ctl", vm.name))
                    .spawn_scoped(s, move || {
                        let r = Vm::run_with(kvm, &vm.spec(), options, |h| registry.register(h));
                        registry.ended(&vm.name);
                        vms_left.fetch_sub(1, Ordering::AcqRel);
                        on_event(RunEvent::VmFinished(&r));
                        r
                    })
            })
            .collect();
        // Every thread of the run has started: confine this one.
        crate::seccomp::install_or_warn(crate::seccomp::ThreadKind::Runner);
        let results = handles
            .into_iter()
            .zip(config.vms.iter())
            .map(|(h, vm)| match h.map(|h| h.join()) {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => failed(&vm.name, "VM controller thread panicked"),
                Err(e) => failed(&vm.name, &format!("cannot spawn controller thread: {e}")),
            })
            .collect::<Vec<_>>();
        done.store(true, Ordering::Release);
        if let Some(g) = guard {
            g.wake();
        }
        if let Some(Ok(t)) = status {
            t.thread().unpark();
        }
        if let (Some(_), Some((_, wake))) = (&api_thread, api_rest) {
            let _ = wake.write(1);
        }
        results
    });
    // Every VM has ended: the CPUs' counters are the whole run's.
    let sched_cpus = engine.as_deref().map(|e| e.snapshot().cpus);
    if let Some(e) = &engine {
        e.shutdown();
    }
    let trace = tracer.map(vcpu_engine::trace::Tracer::outcome);
    if let Some(e) = trace.as_ref().and_then(|t| t.error.as_ref()) {
        log::warn!("{e}");
    }
    Ok(RunResults {
        config: config.path.clone(),
        run_dir: Some(run_dir),
        ok: results.iter().all(|r| r.ok),
        vms: results,
        trace,
        control_changes: api_rest
            .as_ref()
            .map(|(audit, _)| audit.changes())
            .unwrap_or_default(),
        sched_cpus,
    })
}

/// The default dispatch, `ranked`, needs real-time priorities: a config
/// that did not ask for it runs with `threads` where this process may not
/// have them, and a warning says so (None: run as configured).
fn dispatch_fallback(config: &Config) -> Option<Config> {
    let mut c = config.clone();
    let warning = c.fall_back_from_ranked()?;
    log::warn!("{warning}");
    Some(c)
}

/// What a trace says about the run it records.
fn trace_meta(
    config: &Config,
    engine: &EngineConfig,
    cpus: &CpuMap,
) -> vcpu_engine::trace::format::RunMeta {
    vcpu_engine::trace::format::RunMeta {
        policy: config.host.policy.to_string(),
        mode: config.host.mode.to_string(),
        dispatch: config.host.dispatch.to_string(),
        topology: cpus.topology().clone(),
        start_ns: vcpu_engine::clock::now_ns(),
        config: Some(config.path.display().to_string()),
        sched: Some(engine.sched_config()),
    }
}

fn failed(name: &str, msg: &str) -> VmResult {
    log::error!("[{name}] {msg}");
    VmResult::error(name, msg.to_string(), 0.0, "")
}
