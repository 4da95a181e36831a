//! The child processes of a cell: the QEMU peer's VMs and the `native`
//! suite runs. Each starts confined to its core set (every thread it
//! creates inherits the mask) and dies with `pacer bench`
//! (PR_SET_PDEATHSIG), so a killed run leaves nothing behind; what it
//! writes for the bench (a serial console, the suite's output) and its own
//! messages (stderr) go to files in the cell's log directory; [`watch`]
//! polls them until each is done, exits, or the cell's limit comes.

use super::metrics::Sample;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vcpu_engine::host_cpus::HostCpuSet;

/// How often [`watch`] looks at the files.
const POLL: Duration = Duration::from_millis(50);

/// One running child of a cell.
#[derive(Debug)]
pub struct Proc {
    /// The VM it stands for.
    pub name: String,
    /// What it writes for the bench: a serial console, the suite's output.
    pub output: PathBuf,
    /// Its own messages (stderr).
    pub log: PathBuf,
    child: Option<Child>,
    /// Why it ended before its output said it was done: its exit status
    /// with its last messages, or a stop only its messages show.
    pub ended: Option<String>,
}

/// What a process's files say, as the caller reads them.
pub enum Look {
    Running,
    /// It said all it will say: stop it.
    Done,
    /// It cannot go on (e.g. QEMU paused a guest KVM could not run): stop
    /// it, with the reason.
    Stuck(String),
}

/// What one process of a cell produced.
#[derive(Debug, Clone)]
pub struct ProcOutcome {
    pub samples: Vec<Sample>,
    /// None: it reported everything asked of it.
    pub error: Option<String>,
    pub timed_out: bool,
    /// The guest said it does not know the workload.
    pub unknown_workload: bool,
    pub output: PathBuf,
}

/// The watch ended because the run is being stopped (every process killed).
#[derive(Debug)]
pub struct Interrupted;

impl Proc {
    /// Start `cmd` on `cpus`, stderr to `log`; its stdout goes to
    /// `output` when `stdout_is_output` (else it writes `output` itself,
    /// as QEMU's `-serial file:`). An existing `output` is removed first.
    pub fn spawn(
        name: &str,
        cmd: &mut Command,
        cpus: &HostCpuSet,
        output: PathBuf,
        log: PathBuf,
        stdout_is_output: bool,
    ) -> std::io::Result<Proc> {
        let _ = std::fs::remove_file(&output);
        let stdout = if stdout_is_output {
            Stdio::from(File::create(&output)?)
        } else {
            Stdio::null()
        };
        cmd.stdin(Stdio::null())
            .stdout(stdout)
            .stderr(File::create(&log)?);
        let mask = cpus.to_cpu_set();
        // SAFETY: between fork and exec the child makes two system calls
        // (async-signal-safe) on data built before the fork: it binds
        // itself to the core set, and asks to be killed if this thread
        // dies.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mask) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(Proc {
            name: name.to_string(),
            output,
            log,
            child: Some(cmd.spawn()?),
            ended: None,
        })
    }

    /// Its output so far (lossy UTF-8: a guest may print anything).
    pub fn read_output(&self) -> String {
        vmm::input::read_lossy(&self.output, vmm::input::MAX_LOG_BYTES, "a process output")
            .unwrap_or_default()
    }

    fn read_log(&self) -> String {
        vmm::input::read_lossy(&self.log, vmm::input::MAX_LOG_BYTES, "a process log")
            .unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Poll `procs` until every one is done, has exited or is stuck, or until
/// `limit` after `start` (all killed; `Ok(true)`: timed out), or until
/// `should_stop` says so (all killed; `Err`). `look(i, output, log)` reads
/// process `i`'s files.
pub fn watch(
    procs: &mut [Proc],
    start: Instant,
    limit: Duration,
    should_stop: &dyn Fn() -> bool,
    look: &dyn Fn(usize, &str, &str) -> Look,
) -> Result<bool, Interrupted> {
    loop {
        let mut all_done = true;
        for (i, p) in procs.iter_mut().enumerate() {
            if p.child.is_none() {
                continue;
            }
            let log = p.read_log();
            match look(i, &p.read_output(), &log) {
                Look::Done => p.kill(),
                Look::Stuck(why) => {
                    p.kill();
                    p.ended = Some(why);
                }
                Look::Running => match p.child.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => {
                        let last: Vec<&str> = log.lines().rev().take(3).collect();
                        let last: Vec<&str> = last.into_iter().rev().collect();
                        p.ended = Some(format!("exited ({status}) {}", last.join("; ")));
                        p.child = None;
                    }
                    _ => all_done = false,
                },
            }
        }
        if all_done {
            return Ok(false);
        }
        let stop = should_stop();
        if stop || start.elapsed() >= limit {
            procs.iter_mut().for_each(Proc::kill);
            return if stop { Err(Interrupted) } else { Ok(true) };
        }
        std::thread::sleep(POLL);
    }
}

/// Reads process `i`'s output: its samples, or what is missing.
pub type ReadSamples<'a> = &'a dyn Fn(usize, &str) -> Result<Vec<Sample>, String>;

/// The outcome of each process from its output (`samples` says what it
/// reported or what is missing), naming why it stopped when something is.
pub fn outcomes(
    procs: &[Proc],
    timed_out: bool,
    limit: Duration,
    samples: ReadSamples<'_>,
    refused: &dyn Fn(&str) -> bool,
) -> Vec<ProcOutcome> {
    procs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let text = p.read_output();
            let (samples, error) = match samples(i, &text) {
                Ok(s) => (s, None),
                Err(missing) => {
                    let why = if timed_out {
                        format!(
                            "stopped at the cell's time limit ({:.0} s)",
                            limit.as_secs_f64()
                        )
                    } else {
                        p.ended.clone().unwrap_or_else(|| "stopped".into())
                    };
                    let error = format!(
                        "vm {}: {missing}; {why}; output {}",
                        p.name,
                        p.output.display()
                    );
                    (Vec::new(), Some(error))
                }
            };
            ProcOutcome {
                samples,
                timed_out: timed_out && error.is_some(),
                error,
                unknown_workload: refused(&text),
                output: p.output.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pacer-procs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    fn spawn(d: &std::path::Path, name: &str, script: &str) -> Proc {
        Proc::spawn(
            name,
            &mut sh(script),
            &vcpu_engine::host_cpus::online_cpus().unwrap(),
            d.join(format!("{name}.out")),
            d.join(format!("{name}.log")),
            true,
        )
        .unwrap()
    }

    #[test]
    fn done_exited_and_stuck_processes_end_the_watch() {
        let d = dir("ends");
        let mut procs = vec![
            // says it is done, then would run for a minute
            spawn(&d, "done", "echo result=1; echo done; exec sleep 60"),
            // exits on its own with a message
            spawn(&d, "exits", "echo partial; echo oops >&2; exit 3"),
            // its log shows it cannot go on
            spawn(&d, "stuck", "echo STUCK >&2; exec sleep 60"),
        ];
        let start = Instant::now();
        let look = |_: usize, out: &str, log: &str| {
            if out.contains("done") {
                Look::Done
            } else if log.contains("STUCK") {
                Look::Stuck("stuck here".into())
            } else {
                Look::Running
            }
        };
        let timed_out = watch(&mut procs, start, Duration::from_secs(30), &|| false, &look);
        assert!(matches!(timed_out, Ok(false)));
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nothing waited out its sleep"
        );
        assert_eq!(procs[0].ended, None);
        let exited = procs[1].ended.as_deref().unwrap();
        assert!(
            exited.contains("exit status: 3") && exited.contains("oops"),
            "{exited}"
        );
        assert_eq!(procs[2].ended.as_deref(), Some("stuck here"));
        let samples = |i: usize, text: &str| {
            if text.contains("result=1") {
                Ok(vec![Sample {
                    vm: procs[i].name.clone(),
                    group: "g".into(),
                    vcpu: None,
                    metric: "m".into(),
                    value: 1.0,
                }])
            } else {
                Err("no result".to_string())
            }
        };
        let out = outcomes(&procs, false, Duration::from_secs(30), &samples, &|_| false);
        assert_eq!(out[0].samples.len(), 1);
        assert!(out[0].error.is_none());
        let e = out[1].error.as_deref().unwrap();
        assert!(
            e.starts_with("vm exits: no result; exited (") && e.contains("exits.out"),
            "{e}"
        );
        assert!(out[2].error.as_deref().unwrap().contains("stuck here"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_limit_and_a_stop_kill_what_runs() {
        let d = dir("limit");
        let mut procs = vec![spawn(&d, "slow", "exec sleep 60")];
        let running = |_: usize, _: &str, _: &str| Look::Running;
        let start = Instant::now();
        let r = watch(
            &mut procs,
            start,
            Duration::from_millis(200),
            &|| false,
            &running,
        );
        assert!(matches!(r, Ok(true)));
        let out = outcomes(
            &procs,
            true,
            Duration::from_millis(200),
            &|_, _| Err("none".into()),
            &|_| false,
        );
        assert!(out[0].timed_out);
        assert!(out[0].error.as_deref().unwrap().contains("time limit"));

        let mut procs = vec![spawn(&d, "stopped", "exec sleep 60")];
        let r = watch(
            &mut procs,
            Instant::now(),
            Duration::from_secs(30),
            &|| true,
            &running,
        );
        assert!(r.is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
