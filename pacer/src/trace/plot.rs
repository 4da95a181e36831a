//! `pacer trace plot`: the timeline of a trace drawn by Pacer itself
//! (plotters, with the bench report's font set-up), so a run can be seen
//! without a browser: one lane per host CPU, a bar per turn in the
//! vCPU's own colour (a categorical palette: every vCPU distinct), a tick
//! above the lane for each wake sent to that CPU and a red mark for each
//! preemption; under them one lane per vCPU: when it ran and when it
//! waited for a CPU (woken or preempted, not yet dispatched). A long
//! trace drawn whole is a barcode: without a window the busiest window
//! ([`busiest_window`]) is drawn and the title says which.
//! PNG or SVG by the output's extension (both need the TrueType font
//! the bench report uses, which `ci/install.sh` installs).

use super::read::TraceFile;
use crate::bench::plots::{e, font};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use vcpu_engine::trace::record::{Event, StopWhy, VcpuRef};

/// Pixels to the right of the lanes for the legend.
const LEGEND_WIDTH: u32 = 220;

/// About this many turns make a readable picture; a trace with more is
/// drawn over its busiest window of about this many.
pub const READABLE_TURNS: usize = 300;

/// Tableau 10: distinct hues that stay apart for colour-blind readers.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// The colour of a wait for a CPU on a vCPU lane.
const WAITING: RGBColor = RGBColor(0xc8, 0xc8, 0xc8);

/// A turn on a CPU lane.
struct Bar {
    lane: usize,
    from: u64,
    to: u64,
    vcpu: VcpuRef,
}

/// What the picture shows.
struct Timeline {
    lanes: Vec<u16>,
    bars: Vec<Bar>,
    /// Every vCPU of the trace, in (VM, index) order: one lane each.
    vcpus: Vec<VcpuRef>,
    /// (vCPU lane, from, to) of waits for a CPU.
    waits: Vec<(usize, u64, u64)>,
    /// (lane, time) of wakes sent to a CPU, and of preemptions.
    wakes: Vec<(usize, u64)>,
    preemptions: Vec<(usize, u64)>,
    from: u64,
    to: u64,
    /// The window is the busiest one, not the one asked for.
    busiest: bool,
}

fn timeline(trace: &TraceFile, from: u64, to: u64) -> Timeline {
    let lanes: Vec<u16> = trace
        .run
        .topology
        .cpus
        .iter()
        .map(|c| u16::try_from(c.os_id).unwrap_or(u16::MAX))
        .collect();
    let lane = |cpu: u16| lanes.iter().position(|&l| l == cpu);
    let mut open: BTreeMap<u16, (u64, VcpuRef)> = BTreeMap::new();
    let vcpus = all_vcpus(trace);
    let vcpu_lane = |v: VcpuRef| vcpus.iter().position(|&w| w == v);
    // Since when each vCPU waits for a CPU.
    let mut waiting: BTreeMap<VcpuRef, u64> = BTreeMap::new();
    let mut t = Timeline {
        lanes: lanes.clone(),
        bars: Vec::new(),
        vcpus: vcpus.clone(),
        waits: Vec::new(),
        wakes: Vec::new(),
        preemptions: Vec::new(),
        from,
        to,
        busiest: false,
    };
    let close = |t: &mut Timeline, cpu: u16, end: u64, open: &mut BTreeMap<u16, (u64, VcpuRef)>| {
        if let (Some((since, vcpu)), Some(l)) = (open.remove(&cpu), lane(cpu)) {
            if end >= from && since <= to {
                t.bars.push(Bar {
                    lane: l,
                    from: since.max(from),
                    to: end.min(to),
                    vcpu,
                });
            }
        }
    };
    for ev in &trace.events {
        if ev.t_ns > to {
            break;
        }
        match ev.event {
            Event::Dispatch { cpu, vcpu, .. } => {
                close(&mut t, cpu, ev.t_ns, &mut open);
                open.insert(cpu, (ev.t_ns, vcpu));
                if let (Some(since), Some(l)) = (waiting.remove(&vcpu), vcpu_lane(vcpu)) {
                    if ev.t_ns >= from {
                        t.waits.push((l, since.max(from), ev.t_ns));
                    }
                }
            }
            Event::Stop { cpu, why, vcpu, .. } => {
                close(&mut t, cpu, ev.t_ns, &mut open);
                // Still runnable: it waits for its next turn.
                if matches!(
                    why,
                    StopWhy::Quantum | StopWhy::Preempted | StopWhy::Yielded
                ) {
                    waiting.insert(vcpu, ev.t_ns);
                }
                if why == StopWhy::Preempted && ev.t_ns >= from {
                    if let Some(l) = lane(cpu) {
                        t.preemptions.push((l, ev.t_ns));
                    }
                }
            }
            Event::Idle { cpu } => close(&mut t, cpu, ev.t_ns, &mut open),
            Event::Wake { vcpu, cpu, .. } => {
                waiting.entry(vcpu).or_insert(ev.t_ns);
                if let (Some(cpu), true) = (cpu, ev.t_ns >= from) {
                    if let Some(l) = lane(cpu) {
                        t.wakes.push((l, ev.t_ns));
                    }
                }
            }
            _ => {}
        }
    }
    for cpu in open.keys().copied().collect::<Vec<_>>() {
        close(&mut t, cpu, to, &mut open);
    }
    for (v, since) in waiting {
        if let (Some(l), true) = (vcpu_lane(v), since <= to) {
            t.waits.push((l, since.max(from), to));
        }
    }
    t
}

/// Every vCPU of the trace's VMs, in (VM, index) order.
fn all_vcpus(trace: &TraceFile) -> Vec<VcpuRef> {
    let mut v: Vec<VcpuRef> = trace
        .vms
        .iter()
        .flat_map(|m| (0..m.vcpus).map(move |i| VcpuRef { vm: m.id, vcpu: i }))
        .collect();
    v.sort();
    v
}

/// The colour of the `index`th vCPU of the trace: a hue of its own (the
/// palette repeats only after 10 vCPUs).
pub fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// The window a plot without `--from`/`--to` shows: the whole trace if it
/// has at most [`READABLE_TURNS`] turns, else the window of the width
/// that holds about that many turns on average, placed where the most
/// turns start (the busiest). `None`: the whole trace.
pub fn busiest_window(trace: &TraceFile) -> Option<(u64, u64)> {
    let starts: Vec<u64> = trace
        .events
        .iter()
        .filter(|e| matches!(e.event, Event::Dispatch { .. }))
        .map(|e| e.t_ns)
        .collect();
    if starts.len() <= READABLE_TURNS {
        return None;
    }
    let (first, last) = trace.span();
    let width = ((last - first) as u128 * READABLE_TURNS as u128 / starts.len() as u128) as u64;
    let width = width.max(1);
    // Two pointers over the sorted starts: the most starts in [a, a + width].
    let (mut best, mut best_at, mut j) = (0, first, 0);
    for (i, &a) in starts.iter().enumerate() {
        while j < starts.len() && starts[j] <= a.saturating_add(width) {
            j += 1;
        }
        if j - i > best {
            best = j - i;
            best_at = a;
        }
    }
    let from = best_at.min(last.saturating_sub(width)).max(first);
    Some((from, from + width))
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    trace: &TraceFile,
    t: &Timeline,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let width = root.dim_in_pixel().0;
    let (root, legend) = root.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
    let (first, _) = trace.span();
    let ms = |ns: u64| (ns as f64 - first as f64) / 1e6;
    let (x0, x1) = (ms(t.from), ms(t.to).max(ms(t.from) + 1e-3));
    let title = format!(
        "{}: {} policy, {} dispatch, {:.1}-{:.1} ms{}",
        trace
            .run
            .config
            .as_deref()
            .and_then(|c| Path::new(c).file_name())
            .map_or("trace".into(), |f| f.to_string_lossy().into_owned()),
        trace.run.policy,
        trace.run.dispatch,
        x0,
        x1,
        if t.busiest {
            " (the busiest window)"
        } else {
            ""
        }
    );
    let lanes = t.lanes.clone();
    let vcpu_names: Vec<String> = t.vcpus.iter().map(|&v| trace.vcpu_name(v)).collect();
    let index = |v: VcpuRef| t.vcpus.iter().position(|&w| w == v).unwrap_or(0);
    // CPU lanes on top, then a gap lane, then one lane per vCPU.
    let n = (lanes.len() + 1 + vcpu_names.len()) as f64;
    let label_of = move |i: usize| -> String {
        if i < lanes.len() {
            format!("CPU {}", lanes[i])
        } else if i > lanes.len() && i - lanes.len() - 1 < vcpu_names.len() {
            vcpu_names[i - lanes.len() - 1].clone()
        } else {
            String::new()
        }
    };
    let total = n as usize;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(130)
        .build_cartesian_2d(x0..x1, 0.0..n)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("ms from the trace's start")
        .y_labels(total * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-6 && i < total {
                label_of(total - 1 - i)
            } else {
                String::new()
            }
        })
        .disable_y_mesh()
        .draw()
        .map_err(e)?;
    // Lane i from the top.
    let y = |lane: usize| n - 1.0 - lane as f64;
    chart
        .draw_series(t.bars.iter().map(|b| {
            Rectangle::new(
                [(ms(b.from), y(b.lane) + 0.15), (ms(b.to), y(b.lane) + 0.75)],
                colour(index(b.vcpu)).filled(),
            )
        }))
        .map_err(e)?;
    // The vCPU lanes: a vCPU's turns (from the CPU lanes) and its waits.
    let vy = |l: usize| y(t.lanes.len() + 1 + l);
    chart
        .draw_series(t.waits.iter().map(|&(l, a, b)| {
            Rectangle::new(
                [(ms(a), vy(l) + 0.3), (ms(b), vy(l) + 0.6)],
                WAITING.filled(),
            )
        }))
        .map_err(e)?;
    chart
        .draw_series(t.bars.iter().map(|b| {
            let l = index(b.vcpu);
            Rectangle::new(
                [(ms(b.from), vy(l) + 0.15), (ms(b.to), vy(l) + 0.75)],
                colour(l).filled(),
            )
        }))
        .map_err(e)?;
    chart
        .draw_series(t.wakes.iter().map(|&(l, at)| {
            PathElement::new(
                [(ms(at), y(l) + 0.78), (ms(at), y(l) + 0.92)],
                BLACK.stroke_width(1),
            )
        }))
        .map_err(e)?;
    chart
        .draw_series(
            t.preemptions
                .iter()
                .map(|&(l, at)| Cross::new((ms(at), y(l) + 0.08), 4, RED.stroke_width(2))),
        )
        .map_err(e)?;
    // Legend, beside the lanes: one entry per vCPU, then the marks.
    let style = ("sans-serif", 13).into_font().color(&BLACK);
    let mut y = 50;
    for (i, &v) in t.vcpus.iter().enumerate() {
        legend
            .draw(&Rectangle::new(
                [(8, y - 5), (22, y + 5)],
                colour(i).filled(),
            ))
            .map_err(e)?;
        legend
            .draw(&Text::new(trace.vcpu_name(v), (28, y - 7), style.clone()))
            .map_err(e)?;
        y += 20;
    }
    legend
        .draw(&PathElement::new(
            [(15, y - 6), (15, y + 6)],
            BLACK.stroke_width(1),
        ))
        .map_err(e)?;
    legend
        .draw(&Text::new(
            "wake sent to the CPU",
            (28, y - 7),
            style.clone(),
        ))
        .map_err(e)?;
    y += 20;
    legend
        .draw(&Cross::new((15, y), 4, RED.stroke_width(2)))
        .map_err(e)?;
    legend
        .draw(&Text::new("preemption", (28, y - 7), style.clone()))
        .map_err(e)?;
    y += 20;
    legend
        .draw(&Rectangle::new([(8, y - 3), (22, y + 3)], WAITING.filled()))
        .map_err(e)?;
    legend
        .draw(&Text::new("waiting for a CPU", (28, y - 7), style))
        .map_err(e)?;
    root.present().map_err(e)
}

/// Draw `trace` between `from` and `to` (ns on its clock) into `out`
/// (`.png` or `.svg`); `busiest`: the window is [`busiest_window`]'s (the
/// title says so).
pub fn draw(
    trace: &TraceFile,
    from: u64,
    to: u64,
    busiest: bool,
    out: &Path,
) -> Result<(), String> {
    let mut t = timeline(trace, from, to);
    t.busiest = busiest;
    let lanes = (t.lanes.len() + 1 + t.vcpus.len()) as u32;
    let size = (1400, 130 + 45 * lanes.max(t.vcpus.len() as u32 / 2 + 3));
    let ext = out.extension().and_then(|x| x.to_str());
    if matches!(ext, Some("svg" | "png")) {
        // Both backends lay text out with the registered font.
        font()?;
    }
    let io = |e: std::io::Error| format!("{}: {e}", out.display());
    match ext {
        Some("svg") => vmm::whole_file::write_with(
            out,
            |tmp| draw_on(SVGBackend::new(tmp, size).into_drawing_area(), trace, &t),
            io,
        ),
        Some("png") => vmm::whole_file::write_with(
            out,
            |tmp| draw_on(BitMapBackend::new(tmp, size).into_drawing_area(), trace, &t),
            io,
        ),
        _ => Err(format!(
            "{}: the output must end in .png or .svg",
            out.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::read::Timed;
    use vcpu_engine::trace::format::{RunMeta, VmMeta};

    fn vm(id: u16, vcpus: u16) -> VmMeta {
        VmMeta {
            id,
            name: format!("vm{id}"),
            vcpus,
            class: "timeshare".into(),
            priority: 10,
            cpus: vec![0, 1],
        }
    }

    fn trace(vms: Vec<VmMeta>, events: Vec<Timed>) -> TraceFile {
        TraceFile {
            run: RunMeta {
                policy: "haiku".into(),
                mode: "low-latency".into(),
                dispatch: "threads".into(),
                topology: vcpu_sched::Topology::from_spec("1x2x1").unwrap(),
                start_ns: 0,
                config: None,
                sched: None,
            },
            vms,
            rings: Vec::new(),
            events,
            lost: 0,
            complete: true,
            version: 2,
            frames: 1,
            cut_bytes: 0,
        }
    }

    fn dispatch(t_ns: u64, cpu: u16, vcpu: VcpuRef) -> Timed {
        Timed {
            t_ns,
            event: Event::Dispatch {
                cpu,
                vcpu,
                quantum_ns: 1000,
                priority: None,
                by_waker: false,
            },
        }
    }

    const V0: VcpuRef = VcpuRef { vm: 0, vcpu: 0 };
    const V1: VcpuRef = VcpuRef { vm: 0, vcpu: 1 };

    #[test]
    fn every_vcpu_has_its_own_colour() {
        let t = trace(vec![vm(0, 2), vm(1, 3), vm(2, 5)], Vec::new());
        let vcpus = all_vcpus(&t);
        assert_eq!(vcpus.len(), 10);
        let colours: Vec<RGBColor> = (0..vcpus.len()).map(colour).collect();
        for (i, a) in colours.iter().enumerate() {
            for b in &colours[i + 1..] {
                // Apart by more than a shade: some channel differs a lot.
                let d = [(a.0, b.0), (a.1, b.1), (a.2, b.2)]
                    .iter()
                    .map(|&(x, y)| x.abs_diff(y))
                    .max()
                    .unwrap();
                assert!(d >= 40, "{a:?} and {b:?} are too alike");
            }
        }
    }

    #[test]
    fn a_short_trace_is_drawn_whole() {
        let events = (0..READABLE_TURNS as u64)
            .map(|i| dispatch(i * 1000, 0, V0))
            .collect();
        assert_eq!(busiest_window(&trace(vec![vm(0, 1)], events)), None);
    }

    #[test]
    fn a_long_trace_is_drawn_over_its_busiest_window() {
        // 1000 turns spread over 10 s, and 300 packed into 6.0-6.03 s.
        let mut events: Vec<Timed> = (0..1000u64)
            .map(|i| dispatch(i * 10_000_000, 0, V0))
            .collect();
        events.extend((0..300u64).map(|i| dispatch(6_000_000_000 + i * 100_000, 1, V1)));
        events.sort_by_key(|e| e.t_ns);
        let (from, to) = busiest_window(&trace(vec![vm(0, 2)], events)).unwrap();
        let width = to - from;
        // About READABLE_TURNS turns' worth of the average spacing.
        let span = 9_990_000_000u64;
        assert_eq!(width, span * READABLE_TURNS as u64 / 1300);
        assert!(
            from <= 6_000_000_000 && to >= 6_029_900_000,
            "{from}-{to} misses the burst"
        );
    }

    #[test]
    fn vcpu_lanes_show_waits_from_wake_and_preemption_to_dispatch() {
        let events = vec![
            dispatch(0, 0, V0),
            Timed {
                t_ns: 100,
                event: Event::Wake {
                    vcpu: V1,
                    cpu: Some(0),
                    kick: true,
                    cut: false,
                },
            },
            Timed {
                t_ns: 150,
                event: Event::Stop {
                    cpu: 0,
                    vcpu: V0,
                    why: StopWhy::Preempted,
                    thread_cpu_ns: 0,
                },
            },
            dispatch(160, 0, V1),
            Timed {
                t_ns: 300,
                event: Event::Stop {
                    cpu: 0,
                    vcpu: V1,
                    why: StopWhy::Halted,
                    thread_cpu_ns: 0,
                },
            },
            dispatch(310, 0, V0),
        ];
        let t = timeline(&trace(vec![vm(0, 2)], events), 0, 400);
        assert_eq!(t.vcpus, vec![V0, V1]);
        assert_eq!(t.waits, vec![(1, 100, 160), (0, 150, 310)]);
        assert_eq!(t.bars.len(), 3);
        assert_eq!(t.preemptions, vec![(0, 150)]);
    }
}
