//! Scheduling traces of real runs (skipped without /dev/kvm): a ping-pong
//! pair under haiku recorded, read back, summarised step by step,
//! exported for Perfetto, drawn, and replayed through the simulator.

mod common;

use common::{kvm_or_skip, pacer, vm_table, TempDir};
use pacer::trace::replay::{compare, replay_of, Demand};
use pacer::trace::summary::Summary;
use pacer::trace::TraceFile;
use vcpu_engine::trace::Event;
use vmm::config::Config;
use vmm::runner::{run, RunError, RunOptions};

fn pingpong(dir: &TempDir, policy: &str) -> Config {
    let vm = vm_table("pp", "pingpong duration_ms=400").replace("vcpus = 1", "vcpus = 2");
    let cfg = dir.config(&format!(
        "[host]\ncpus = \"0-1\"\npolicy = \"{policy}\"\n{}log_dir = \"logs\"\n\n{vm}",
        // Pacer's own local APIC: the trace explains its IPIs and halts.
        if policy == "host" {
            ""
        } else {
            "dispatch = \"threads\"\n"
        }
    ));
    Config::load(&cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn traced(config: &Config, path: &std::path::Path) -> Result<vmm::results::RunResults, RunError> {
    let opts = RunOptions {
        run_start: std::time::Instant::now(),
        status: false,
        trace: Some(path.to_path_buf()),
        api: Default::default(),
    };
    run(config, &opts, &|_| {})
}

#[test]
fn a_pingpong_trace_explains_its_round_trip_and_replays() {
    if !kvm_or_skip("a_pingpong_trace_explains_its_round_trip_and_replays") {
        return;
    }
    let dir = TempDir::new("trace-pingpong");
    let path = dir.0.join("pp.trace");
    let results = traced(&pingpong(&dir, "haiku"), &path).unwrap();
    assert!(results.ok, "{results:?}");
    let outcome = results.trace.clone().expect("a trace outcome");
    assert_eq!(outcome.error, None);
    let trace = TraceFile::read(&path).unwrap();
    assert!(trace.complete);
    assert_eq!(trace.lost, outcome.lost);
    assert_eq!(trace.events.len() as u64, outcome.records);
    assert_eq!(trace.vms.len(), 1);
    assert_eq!(trace.vms[0].name, "pp");
    // Every kind of event a ping-pong makes is there.
    let has = |f: fn(&Event) -> bool| trace.events.iter().any(|e| f(&e.event));
    assert!(has(|e| matches!(
        e,
        Event::Dispatch {
            priority: Some(_),
            ..
        }
    )));
    assert!(has(|e| matches!(
        e,
        Event::Stop {
            why: vcpu_engine::trace::StopWhy::Halted,
            ..
        }
    )));
    assert!(has(|e| matches!(
        e,
        Event::Notify {
            cause: vcpu_engine::trace::Cause::Ipi { .. },
            ..
        }
    )));
    assert!(has(|e| matches!(e, Event::Wake { cpu: Some(_), .. })));
    assert!(has(|e| matches!(e, Event::Inject { vector: 0xfd, .. })));
    assert!(has(|e| matches!(e, Event::Eoi { vector: 0xfd, .. })));
    // Halt polls: the run's statistics count the polls the trace shows.
    if trace.lost == 0 {
        for (i, v) in results.vms[0].vcpu_sched.iter().enumerate() {
            let (mut polls, mut woken) = (0, 0);
            for e in &trace.events {
                if let Event::HaltPoll { vcpu, woken: w, .. } = e.event {
                    if usize::from(vcpu.vcpu) == i {
                        polls += 1;
                        woken += u64::from(w);
                    }
                }
            }
            assert_eq!((v.halt_poll.polls, v.halt_poll.woken), (polls, woken));
            assert!(v.halt_poll.woken <= v.halt_poll.polls);
        }
    }

    // The summary follows IPI wakes from the send to the guest's handler.
    let s = Summary::of(&trace);
    let ipi = s
        .wake_paths
        .iter()
        .find(|c| c.class.starts_with("IPI") && c.complete > 10)
        .unwrap_or_else(|| panic!("no IPI wake path: {:?}", s.wake_paths));
    let steps: Vec<&str> = ipi.steps.iter().map(|r| r.step).collect();
    for step in ["decision", "dispatched", "injected", "handler (EOI)"] {
        assert!(steps.contains(&step), "{step} missing from {steps:?}");
    }
    let rt = s.round_trips.first().expect("round trips");
    assert!(rt.round_trip.count > 10, "{rt:?}");
    // Its four steps tile the round trip: their means add up to its mean.
    let sum: u64 = rt.steps.iter().map(|(_, q)| q.mean_ns).sum();
    assert!(sum.abs_diff(rt.round_trip.mean_ns) <= 4, "{sum} vs {rt:?}");
    let text = s.to_text(&trace);
    assert!(
        text.contains("IPI round trips pp/vcpu0 <-> pp/vcpu1"),
        "{text}"
    );

    // Perfetto: CPU and vCPU tracks, slices, wake arrows.
    let doc: serde_json::Value =
        serde_json::from_str(&pacer::trace::export::perfetto_json(&trace)).unwrap();
    let evs = doc["traceEvents"].as_array().unwrap();
    let count = |ph: &str| evs.iter().filter(|e| e["ph"] == ph).count();
    assert!(count("X") > 10 && count("s") > 10 && count("f") > 10);
    let names: Vec<&str> = evs
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    for n in ["CPU 0", "CPU 1", "vcpu0", "vcpu1"] {
        assert!(names.contains(&n), "{n} not in {names:?}");
    }
    assert_eq!(doc["otherData"]["schema_version"], 1);

    // The timeline (text needs a TrueType font, which ci/install.sh installs).
    let svg = dir.0.join("pp.svg");
    let (first, last) = trace.span();
    match pacer::trace::plot::draw(&trace, first, last, false, &svg) {
        Err(e) if e.contains("no TrueType font") => println!("SKIPPED: the timeline ({e})"),
        r => {
            r.unwrap();
            assert!(std::fs::read_to_string(&svg).unwrap().contains("CPU 1"));
        }
    }

    // Replayed on the recorded topology under the recorded policy: the
    // same run share per vCPU, and the same report every time.
    let rec = replay_of(&trace, None, None, Demand::Scheduled).unwrap();
    let a = rec.replay.run().unwrap();
    let b = rec.replay.run().unwrap();
    assert_eq!(a.without_host_timing(), b.without_host_timing());
    assert_eq!(a.violations.total(), 0);
    for row in compare(&rec, &a) {
        let ratio = row.replay_run_share / row.recorded_sched_run_share;
        assert!((0.9..=1.1).contains(&ratio), "{row:?}");
    }
    // On another topology and policy it runs as well.
    let other = replay_of(
        &trace,
        Some(vcpu_sched::Topology::from_spec("2x2x2").unwrap()),
        Some(vcpu_sched::PolicyKind::GlobalRoundRobin),
        Demand::ThreadCpu,
    )
    .unwrap();
    assert_eq!(other.replay.run().unwrap().violations.total(), 0);
}

#[test]
fn tracing_is_refused_under_policy_host() {
    if !kvm_or_skip("tracing_is_refused_under_policy_host") {
        return;
    }
    let dir = TempDir::new("trace-host");
    let path = dir.0.join("h.trace");
    let r = traced(&pingpong(&dir, "host"), &path);
    assert!(matches!(r, Err(RunError::TraceUnderHost)), "{r:?}");
    assert!(!path.exists());
}

/// The legend covers every step a path can go through after its cause,
/// in the order the summary prints them.
#[test]
fn the_summary_legend_names_every_step() {
    let steps: Vec<&str> = pacer::trace::summary::STEP_LEGEND
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(steps, pacer::trace::summary::STEPS[1..].to_vec());
    let legend = pacer::trace::summary::legend();
    for (step, what) in pacer::trace::summary::STEP_LEGEND {
        assert!(legend.contains(&format!("{step:<16} {what}")), "{legend}");
    }
}

#[test]
fn the_trace_commands_say_what_they_wrote_and_found() {
    if !kvm_or_skip("the_trace_commands_say_what_they_wrote_and_found") {
        return;
    }
    let dir = TempDir::new("trace-say");
    let _ = pingpong(&dir, "haiku");
    let trace = dir.0.join("pp.trace");
    let cfg = dir.0.join("pacer.toml");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let t = trace.to_str().unwrap();
    let file = pacer::trace::TraceFile::read(&trace).unwrap();
    let events = file.events.len();
    let turns = file
        .events
        .iter()
        .filter(|e| matches!(e.event, Event::Dispatch { .. }))
        .count();

    // The summary explains its steps under the tables.
    let (code, out, err) = pacer(&["trace", "summary", t]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Steps (each the time since the step before it"),
        "{out}"
    );
    for (step, what) in pacer::trace::summary::STEP_LEGEND {
        assert!(out.contains(&format!("{step:<16} {what}")), "{step}: {out}");
    }

    // export: what, how many and where.
    let json = dir.0.join("pp.json");
    let (code, out, err) = pacer(&["trace", "export", t, "--out", json.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("pacer: {events} events over "))
            && out.contains(&format!(
                "written to {} as Chrome trace event JSON",
                json.display()
            )),
        "{out}"
    );

    // dump: the events on stdout, how many on stderr; a window without
    // events says so, with the trace's span.
    let (code, out, err) = pacer(&["trace", "dump", t]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), events);
    assert!(
        err.contains(&format!("pacer: {events} events in 0.000-")),
        "{err}"
    );
    let (code, out, err) = pacer(&["trace", "dump", t, "--from", "99000", "--to", "99001"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("pacer: no events in 99000.000-99001.000 ms; the trace has")
            && err.contains(&format!("{events} events over 0.000-")),
        "{err}"
    );

    // plot: which window it drew: all of a short trace, the busiest
    // window of a long one.
    let png = dir.0.join("pp.png");
    let (code, out, err) = pacer(&["trace", "plot", t, "--out", png.to_str().unwrap()]);
    if err.contains("no TrueType font") {
        println!("SKIPPED: the plot ({err})");
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert!(
        out.ends_with(&format!("written to {}\n", png.display())),
        "{out}"
    );
    if turns > pacer::trace::plot::READABLE_TURNS {
        assert!(
            out.starts_with("pacer: timeline of the busiest "),
            "{turns}: {out}"
        );
        assert!(out.contains("--from 0 the whole trace"), "{out}");
    } else {
        assert!(out.starts_with("pacer: timeline of 0.0-"), "{turns}: {out}");
    }
    // --from 0: the whole trace, whatever its length.
    let (code, out, err) = pacer(&[
        "trace",
        "plot",
        t,
        "--out",
        png.to_str().unwrap(),
        "--from",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("pacer: timeline of 0.0-"), "{out}");
}
