//! `pacer trace plot`: the timeline of a trace drawn by Pacer itself
//! (plotters, with the bench report's font set-up), so a run can be seen
//! without a browser: one lane per host CPU, a bar per turn coloured by
//! the vCPU's VM (lighter for higher vCPU indexes), a tick above the lane
//! for each wake sent to that CPU and a red mark for each preemption.
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
const LEGEND_WIDTH: u32 = 200;

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
    /// (lane, time) of wakes sent to a CPU, and of preemptions.
    wakes: Vec<(usize, u64)>,
    preemptions: Vec<(usize, u64)>,
    from: u64,
    to: u64,
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
    let mut t = Timeline {
        lanes: lanes.clone(),
        bars: Vec::new(),
        wakes: Vec::new(),
        preemptions: Vec::new(),
        from,
        to,
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
            }
            Event::Stop { cpu, why, .. } => {
                close(&mut t, cpu, ev.t_ns, &mut open);
                if why == StopWhy::Preempted && ev.t_ns >= from {
                    if let Some(l) = lane(cpu) {
                        t.preemptions.push((l, ev.t_ns));
                    }
                }
            }
            Event::Idle { cpu } => close(&mut t, cpu, ev.t_ns, &mut open),
            Event::Wake { cpu: Some(cpu), .. } if ev.t_ns >= from => {
                if let Some(l) = lane(cpu) {
                    t.wakes.push((l, ev.t_ns));
                }
            }
            _ => {}
        }
    }
    for cpu in open.keys().copied().collect::<Vec<_>>() {
        close(&mut t, cpu, to, &mut open);
    }
    t
}

/// The colour of a vCPU: its VM's, lighter for higher indexes.
fn colour(v: VcpuRef) -> RGBColor {
    let base = Palette99::pick(usize::from(v.vm)).to_rgba();
    let k = 0.22 * f64::from(v.vcpu.min(3));
    let mix = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * k) as u8;
    RGBColor(mix(base.0), mix(base.1), mix(base.2))
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
    let n = t.lanes.len().max(1) as f64;
    let title = format!(
        "{}: {} policy, {} dispatch, {:.1}-{:.1} ms",
        trace
            .run
            .config
            .as_deref()
            .and_then(|c| Path::new(c).file_name())
            .map_or("trace".into(), |f| f.to_string_lossy().into_owned()),
        trace.run.policy,
        trace.run.dispatch,
        x0,
        x1
    );
    let lanes = t.lanes.clone();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..n)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("ms from the trace's start")
        .y_labels(lanes.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-6 && i < lanes.len() {
                format!("CPU {}", lanes[lanes.len() - 1 - i])
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
                colour(b.vcpu).filled(),
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
    // Legend, beside the lanes: one entry per vCPU seen, then the marks.
    let mut seen: Vec<VcpuRef> = t.bars.iter().map(|b| b.vcpu).collect();
    seen.sort();
    seen.dedup();
    let style = ("sans-serif", 13).into_font().color(&BLACK);
    let mut y = 50;
    for v in seen {
        legend
            .draw(&Rectangle::new(
                [(8, y - 5), (22, y + 5)],
                colour(v).filled(),
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
        .draw(&Text::new("preemption", (28, y - 7), style))
        .map_err(e)?;
    root.present().map_err(e)
}

/// Draw `trace` between `from` and `to` (ns on its clock) into `out`
/// (`.png` or `.svg`).
pub fn draw(trace: &TraceFile, from: u64, to: u64, out: &Path) -> Result<(), String> {
    let t = timeline(trace, from, to);
    let size = (1400, 150 + 70 * t.lanes.len() as u32);
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
