//! What one traced event costs on the recording thread: `Trace::emit`
//! (clock read, thread-local ring lookup, record copy, release store),
//! measured by `ci/measure_trace.sh` as a cachegrind differential (run
//! with N and N + 200000 events) and here as wall time per event.
//!
//! ```text
//! trace_cost N emit        N events recorded (Dispatch, the common kind)
//! trace_cost N stop        N Stop events, each with the thread's CPU time
//!                          read as the engine does (CLOCK_THREAD_CPUTIME_ID)
//! trace_cost N off         N event sites with tracing off (one branch each)
//! trace_cost N drain       N events recorded, then drained into the file
//!                          (the drain thread's share, timed separately)
//! ```
//! The drain never runs during the loop (its period is an hour and the
//! ring holds every event), so only the recording side is counted; the
//! process ends without writing the file, except in `drain` mode.

use std::hint::black_box;
use std::time::{Duration, Instant};
use vcpu_engine::clock::thread_cpu_ns;
use vcpu_engine::trace::format::RunMeta;
use vcpu_engine::trace::{Event, StopWhy, Trace, TraceConfig, Tracer, VcpuRef};

fn record(t: Option<&Trace>, make: impl FnOnce() -> Event) {
    if let Some(t) = t {
        t.emit(make());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mode = args.next().unwrap_or_else(|| "emit".into());
    let dir = std::env::temp_dir().join(format!("pacer-trace-cost-{}", std::process::id()));
    let mut config = TraceConfig::new(&dir.join("cost.trace"));
    config.ring_capacity = (n as usize + 16).max(1 << 10);
    config.drain_every = Duration::from_secs(3600);
    let tracer = Tracer::start(
        &config,
        RunMeta {
            policy: "haiku".into(),
            mode: "low-latency".into(),
            dispatch: "threads".into(),
            topology: vcpu_sched::Topology::from_spec("1x2x1").expect("a topology"),
            start_ns: 0,
            config: None,
            sched: None,
        },
    )
    .expect("a tracer");
    let trace = tracer.trace();
    let on = (mode != "off").then_some(&trace);
    let v = VcpuRef { vm: 0, vcpu: 1 };
    // One event first: the thread's ring is registered outside the loop.
    record(Some(&trace), || Event::Idle { cpu: 0 });
    let t0 = Instant::now();
    for i in 0..n {
        match mode.as_str() {
            "stop" => record(on, || Event::Stop {
                cpu: 1,
                vcpu: v,
                why: StopWhy::Quantum,
                thread_cpu_ns: thread_cpu_ns(),
            }),
            _ => record(on, || Event::Dispatch {
                cpu: 1,
                vcpu: v,
                quantum_ns: black_box(i),
                priority: Some(10),
                by_waker: false,
            }),
        }
    }
    let dt = t0.elapsed();
    eprintln!(
        "{mode}: {n} events in {:.1} ms, {:.1} ns/event",
        dt.as_secs_f64() * 1e3,
        dt.as_nanos() as f64 / n.max(1) as f64
    );
    if mode == "drain" {
        let t1 = Instant::now();
        let totals = tracer.finish().expect("the trace written");
        let dt = t1.elapsed();
        eprintln!(
            "drain: {} records ({} bytes) written in {:.1} ms, {:.1} ns/event",
            totals.records,
            totals.bytes,
            dt.as_secs_f64() * 1e3,
            dt.as_nanos() as f64 / totals.records.max(1) as f64
        );
    } else {
        // Leave without draining: only the recording side is measured.
        std::mem::forget(tracer);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::process::exit(0);
}
