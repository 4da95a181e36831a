//! Events in words: one line per event for `pacer trace dump` (in the
//! manner of `perf script`), and the names the export and the plot give
//! them.

use super::read::TraceFile;
use std::fmt::Write;
use vcpu_engine::trace::record::{Cause, Event, VcpuRef};

/// The host CPU and the vCPU an event is about.
pub fn subjects(e: &Event) -> (Option<u16>, Option<VcpuRef>) {
    match *e {
        Event::Dispatch { cpu, vcpu, .. }
        | Event::Stop { cpu, vcpu, .. }
        | Event::ExitSeen { cpu, vcpu }
        | Event::Inject { cpu, vcpu, .. }
        | Event::Unpark { cpu, vcpu, .. }
        | Event::HaltPoll { cpu, vcpu, .. } => (Some(cpu), Some(vcpu)),
        Event::Cut { cpu, woken, .. } => (Some(cpu), Some(woken)),
        Event::Migrate { vcpu, to, .. } => (Some(to), Some(vcpu)),
        Event::Wake { vcpu, cpu, .. } => (cpu, Some(vcpu)),
        Event::Notify { vcpu, .. } | Event::Eoi { vcpu, .. } | Event::Park { vcpu } => {
            (None, Some(vcpu))
        }
        Event::Idle { cpu } | Event::Kick { cpu, .. } => (Some(cpu), None),
        Event::Lost { .. } => (None, None),
    }
}

/// A short name of the event's kind.
pub fn name(e: &Event) -> &'static str {
    match e {
        Event::Dispatch { .. } => "dispatch",
        Event::Idle { .. } => "idle",
        Event::Stop { why, .. } => why.as_str(),
        Event::Cut { .. } => "quantum cut",
        Event::Notify { .. } => "notify",
        Event::Wake { .. } => "wake",
        Event::Kick { .. } => "kick",
        Event::ExitSeen { .. } => "exit seen",
        Event::Inject { .. } => "inject",
        Event::Eoi { .. } => "EOI",
        Event::Migrate { .. } => "migrate",
        Event::Park { .. } => "park",
        Event::Unpark { .. } => "unpark",
        Event::Lost { .. } => "lost",
        Event::HaltPoll { .. } => "halt poll",
    }
}

/// A cause in words.
pub fn cause(trace: &TraceFile, v: VcpuRef, c: Cause) -> String {
    match c {
        Cause::Timer { deadline_ns: 0 } => "timer".into(),
        Cause::Timer { deadline_ns } => format!("timer (deadline {})", ms(trace, deadline_ns)),
        Cause::Ipi { from } => format!(
            "IPI from {}",
            trace.vcpu_name(VcpuRef {
                vm: v.vm,
                vcpu: from
            })
        ),
        Cause::Line { pin: Some(p) } => format!("device line (pin {p})"),
        Cause::Line { pin: None } => "device line".into(),
        Cause::Start => "VM start".into(),
        Cause::Resume => "VM resume".into(),
        Cause::Kvm => "woken inside KVM".into(),
    }
}

/// The details of an event after its name.
pub fn details(trace: &TraceFile, e: &Event) -> String {
    match *e {
        Event::Dispatch {
            quantum_ns,
            priority,
            by_waker,
            ..
        } => {
            let mut s = format!("quantum {} us", quantum_ns / 1000);
            if let Some(p) = priority {
                let _ = write!(s, ", E {p}");
            }
            if by_waker {
                s.push_str(", by the waker");
            }
            s
        }
        Event::Cut { end_in_ns, .. } => format!("slice ends in {} us", end_in_ns / 1000),
        Event::Notify { vcpu, cause: c } => cause(trace, vcpu, c),
        Event::Wake { cpu, kick, cut, .. } => match cpu {
            None => "already runnable".into(),
            Some(c) => format!(
                "to CPU {c}{}{}",
                if kick { ", kick" } else { "" },
                if cut { ", runner's slice cut" } else { "" }
            ),
        },
        Event::Kick { busy, .. } => if busy {
            "running: signalled"
        } else {
            "idle: given work"
        }
        .into(),
        Event::Inject { vector, .. } | Event::Eoi { vector, .. } => format!("vector {vector:#x}"),
        Event::Migrate { from, to, .. } => format!("CPU {from} -> {to}"),
        Event::Lost { count } => format!("{count} events lost (a full ring)"),
        Event::HaltPoll {
            polled_ns, woken, ..
        } => format!(
            "{:.1} us, {}",
            polled_ns as f64 / 1e3,
            if woken {
                "work came"
            } else {
                "none came: sleeps"
            }
        ),
        _ => String::new(),
    }
}

/// `t` as ms after the trace's first event.
pub fn ms(trace: &TraceFile, t: u64) -> String {
    let (first, _) = trace.span();
    format!("{:.6} ms", (t as f64 - first as f64) / 1e6)
}

/// Every event in [from, to] as a line.
pub fn dump(trace: &TraceFile, from: u64, to: u64) -> String {
    let mut out = String::new();
    for t in trace
        .events
        .iter()
        .filter(|e| e.t_ns >= from && e.t_ns <= to)
    {
        let (cpu, vcpu) = subjects(&t.event);
        let _ = writeln!(
            out,
            "{:>16}  {:>6}  {:<16} {:<14} {}",
            ms(trace, t.t_ns),
            cpu.map(|c| format!("cpu {c}")).unwrap_or_default(),
            vcpu.map(|v| trace.vcpu_name(v)).unwrap_or_default(),
            name(&t.event),
            details(trace, &t.event)
        );
    }
    out
}
