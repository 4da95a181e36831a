//! A fuzzing driver that builds on the stable toolchain.
//!
//! No coverage feedback (that needs nightly's sanitizer coverage): inputs
//! are generated from a seeded ChaCha8 stream, a quarter of them as fresh
//! random bytes, the rest by stacking 1-8 havoc mutations (bit flips,
//! interesting values, byte runs, inserted or deleted chunks, splices) on
//! an input from the pool: the target's hand-made seeds plus the last
//! [`POOL`] mutants, so mutations compound. Targets interpret the bytes
//! with `arbitrary`, so the same bytes drive structured operation
//! sequences.
//!
//! Each input runs under `catch_unwind`: a panic or an invariant the
//! target reports broken is a finding; its input is written to the
//! findings directory (replay it with `pacer-fuzz --replay FILE`). A
//! watchdog thread aborts the process, after saving the input, if one
//! input runs longer than the hang limit; resident memory is sampled and
//! a run whose RSS passes the cap is a finding too. Same seed, same inputs.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Mutants kept for further mutation.
const POOL: usize = 64;
/// RSS is sampled every this many inputs.
const RSS_EVERY: u64 = 1024;

/// One fuzz target.
pub trait Target {
    /// Short name (`config`, `pio`, ...).
    fn name(&self) -> &'static str;
    /// Meaningful starting inputs.
    fn seeds(&self) -> Vec<Vec<u8>>;
    /// Longest input generated.
    fn max_len(&self) -> usize {
        4096
    }
    /// Run one input. `Err` reports a broken invariant (a finding, like a
    /// panic).
    fn run(&mut self, data: &[u8]) -> Result<(), String>;
}

/// Run limits.
#[derive(Debug, Clone)]
pub struct Options {
    pub inputs: u64,
    pub seed: u64,
    /// Where findings are written (None: not written).
    pub findings_dir: Option<PathBuf>,
    /// One input running longer than this aborts the process.
    pub hang_limit: Duration,
    /// Resident memory above this is a finding (KiB).
    pub rss_cap_kib: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            inputs: 10_000,
            seed: 1,
            findings_dir: None,
            hang_limit: Duration::from_secs(10),
            rss_cap_kib: 2 << 20,
        }
    }
}

/// A panic or a broken invariant, with the input that caused it.
#[derive(Debug, Clone)]
pub struct Finding {
    pub what: String,
    pub input: Vec<u8>,
    pub saved_to: Option<PathBuf>,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub inputs: u64,
    pub elapsed: Duration,
    /// CPU time of the fuzzing thread (wall time counts other processes'
    /// turns on a shared machine; this does not).
    pub cpu: Duration,
    pub findings: Vec<Finding>,
    /// Largest resident set seen, KiB.
    pub max_rss_kib: u64,
    /// Slowest single input, and the input (saved as
    /// `<target>-slowest.bin` beside the findings).
    pub slowest: Duration,
    pub slowest_input: Vec<u8>,
}

impl Report {
    /// Inputs per second of wall time.
    pub fn per_second(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Inputs per second of the fuzzing thread's CPU time.
    pub fn per_cpu_second(&self) -> f64 {
        self.inputs as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Resident set size of this process, KiB (0 if unknown).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4)
        .unwrap_or(0)
}

const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    u64::MAX,
    u64::MAX - 1,
    0x10_0000,
    0xfee0_0000,
    0xfec0_0000,
    0x5243_4150,
];

/// Apply 1-8 havoc mutations to `data` (in place), within `max_len`.
pub fn mutate(rng: &mut ChaCha8Rng, data: &mut Vec<u8>, pool: &[Vec<u8>], max_len: usize) {
    let rounds = rng.random_range(1..=8);
    for _ in 0..rounds {
        let len = data.len();
        match rng.random_range(0..9) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                data[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                data[i] = rng.random();
            }
            2 if len > 0 => {
                // An interesting value, 1/2/4/8 bytes little endian.
                let v = INTERESTING[rng.random_range(0..INTERESTING.len())];
                let w = [1usize, 2, 4, 8][rng.random_range(0..4)].min(len);
                let i = rng.random_range(0..=len - w);
                data[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
            3 if len > 0 => {
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(64));
                data.drain(i..i + n);
            }
            4 => {
                let i = rng.random_range(0..=len);
                let n = rng.random_range(1..=64);
                let b: u8 = if rng.random() { rng.random() } else { 0 };
                data.splice(i..i, std::iter::repeat_n(b, n));
            }
            5 if len > 1 => {
                // Duplicate a chunk of itself.
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(128));
                let chunk = data[i..i + n].to_vec();
                let at = rng.random_range(0..=len);
                data.splice(at..at, chunk);
            }
            6 if !pool.is_empty() => {
                // Splice in a chunk of another input.
                let other = &pool[rng.random_range(0..pool.len())];
                if !other.is_empty() {
                    let i = rng.random_range(0..other.len());
                    let n = rng.random_range(1..=(other.len() - i).min(256));
                    let at = rng.random_range(0..=len);
                    data.splice(at..at, other[i..i + n].iter().copied());
                }
            }
            7 if len > 0 => {
                let i = rng.random_range(0..len);
                data[i] = data[i]
                    .wrapping_add(rng.random_range(1..=35))
                    .wrapping_sub(17);
            }
            _ => {
                let n = rng.random_range(1..=16);
                for _ in 0..n {
                    data.push(rng.random());
                }
            }
        }
    }
    data.truncate(max_len);
}

thread_local! {
    /// Set while this thread runs a fuzz input.
    static FUZZING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Silence the panic message of a fuzz input (the finding reports it);
/// any other panic goes to the previous hook. Installed once.
fn quiet_panics() -> Arc<Mutex<Option<String>>> {
    static LAST: std::sync::OnceLock<Arc<Mutex<Option<String>>>> = std::sync::OnceLock::new();
    LAST.get_or_init(|| {
        let last = Arc::new(Mutex::new(None));
        let l = last.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if FUZZING.with(|f| f.get()) {
                *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(info.to_string());
            } else {
                previous(info);
            }
        }));
        last
    })
    .clone()
}

fn save(dir: Option<&Path>, target: &str, n: usize, input: &[u8]) -> Option<PathBuf> {
    let dir = dir?;
    std::fs::create_dir_all(dir).ok()?;
    let p = dir.join(format!("{target}-{n}.bin"));
    std::fs::write(&p, input).ok()?;
    Some(p)
}

/// Run one input, catching a panic.
pub fn run_one(target: &mut dyn Target, input: &[u8]) -> Result<(), String> {
    let last = quiet_panics();
    FUZZING.with(|f| f.set(true));
    let result = catch_unwind(AssertUnwindSafe(|| target.run(input)));
    FUZZING.with(|f| f.set(false));
    match result {
        Ok(r) => r,
        Err(_) => Err(format!(
            "panic: {}",
            last.lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_default()
        )),
    }
}

/// Fuzz `target` for `opts.inputs` inputs.
pub fn fuzz(target: &mut dyn Target, opts: &Options) -> Report {
    let name = target.name();
    let max_len = target.max_len();
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let seeds = target.seeds();
    let mut pool: Vec<Vec<u8>> = Vec::with_capacity(POOL);
    let mut findings = Vec::new();
    let mut max_rss = rss_kib();
    let mut slowest = Duration::ZERO;
    let mut slowest_input = Vec::new();

    // The watchdog: aborts on a hang, after saving the input in flight.
    let started = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let in_flight: Arc<Mutex<Vec<u8>>> = Arc::new(Mutex::new(Vec::new()));
    let watchdog = {
        let (started, done, in_flight) = (started.clone(), done.clone(), in_flight.clone());
        let (limit, dir) = (opts.hang_limit, opts.findings_dir.clone());
        let epoch = Instant::now();
        let handle = std::thread::Builder::new()
            .name(format!("fuzz/{name}/watchdog"))
            .spawn(move || {
                while !done.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(100));
                    let t = started.load(Ordering::Acquire);
                    if t != 0 && epoch.elapsed().as_nanos() as u64 > t + limit.as_nanos() as u64 {
                        let input = in_flight.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        let at = save(dir.as_deref(), name, usize::MAX, &input);
                        eprintln!(
                            "pacer-fuzz: {name}: one input ran longer than {limit:?} (a hang); input saved to {at:?}"
                        );
                        std::process::abort();
                    }
                }
            });
        (handle, epoch)
    };

    let t0 = Instant::now();
    let cpu0 = thread_cpu_time();
    for i in 0..opts.inputs {
        let input = if (i as usize) < seeds.len() {
            seeds[i as usize].clone()
        } else if rng.random_range(0..4) == 0 || (seeds.is_empty() && pool.is_empty()) {
            let n = rng.random_range(0..=max_len);
            (0..n).map(|_| rng.random()).collect()
        } else {
            let k = rng.random_range(0..seeds.len() + pool.len());
            let mut base = if k < seeds.len() {
                seeds[k].clone()
            } else {
                pool[k - seeds.len()].clone()
            };
            mutate(&mut rng, &mut base, &pool, max_len);
            base
        };
        in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone_from(&input);
        let t = Instant::now();
        started.store(
            (watchdog.1.elapsed().as_nanos() as u64).max(1),
            Ordering::Release,
        );
        let r = run_one(target, &input);
        started.store(0, Ordering::Release);
        if t.elapsed() > slowest {
            slowest = t.elapsed();
            slowest_input.clone_from(&input);
        }
        if let Err(what) = r {
            let saved_to = save(opts.findings_dir.as_deref(), name, findings.len(), &input);
            findings.push(Finding {
                what,
                input: input.clone(),
                saved_to,
            });
        }
        if pool.len() < POOL {
            pool.push(input);
        } else {
            let k = rng.random_range(0..POOL);
            pool[k] = input;
        }
        if i % RSS_EVERY == RSS_EVERY - 1 {
            let rss = rss_kib();
            max_rss = max_rss.max(rss);
            if rss > opts.rss_cap_kib && !findings.iter().any(|f| f.what.starts_with("memory")) {
                findings.push(Finding {
                    what: format!(
                        "memory: RSS {rss} KiB above the cap {} KiB",
                        opts.rss_cap_kib
                    ),
                    input: Vec::new(),
                    saved_to: None,
                });
            }
        }
    }
    let elapsed = t0.elapsed();
    let cpu = thread_cpu_time().saturating_sub(cpu0);
    if let Some(dir) = opts.findings_dir.as_deref() {
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(dir.join(format!("{name}-slowest.bin")), &slowest_input);
    }
    done.store(true, Ordering::Release);
    if let Ok(h) = watchdog.0 {
        let _ = h.join();
    }
    Report {
        target: name,
        inputs: opts.inputs,
        elapsed,
        cpu,
        findings,
        max_rss_kib: max_rss.max(rss_kib()),
        slowest,
        slowest_input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Picky;
    impl Target for Picky {
        fn name(&self) -> &'static str {
            "picky"
        }
        fn seeds(&self) -> Vec<Vec<u8>> {
            vec![b"ok".to_vec()]
        }
        fn max_len(&self) -> usize {
            8
        }
        fn run(&mut self, data: &[u8]) -> Result<(), String> {
            if data.first() == Some(&b'!') {
                panic!("bang");
            }
            if data.len() == 3 {
                return Err("three".into());
            }
            Ok(())
        }
    }

    #[test]
    fn finds_panics_and_broken_invariants_deterministically() {
        let opts = Options {
            inputs: 5000,
            ..Options::default()
        };
        let a = fuzz(&mut Picky, &opts);
        let b = fuzz(&mut Picky, &opts);
        assert_eq!(a.inputs, 5000);
        assert!(a
            .findings
            .iter()
            .any(|f| f.what.contains("panic: ") && f.what.contains("bang")));
        assert!(a.findings.iter().any(|f| f.what == "three"));
        assert!(a.findings.iter().all(|f| f.input.len() <= 8));
        let inputs = |r: &Report| {
            r.findings
                .iter()
                .map(|f| f.input.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(inputs(&a), inputs(&b), "same seed, same findings");
    }
}
