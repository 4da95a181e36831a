//! Mechanism costs of the scheduled engine, side by side in one run (this
//! machine is noisy: compare ratios, not absolute times). Print them with
//! `cargo test -p vmm --release --test engine_costs -- --nocapture`
//! (`ci/measure_engine.sh` does that). Skipped without /dev/kvm.
//!
//! - exit round trip: a guest OUTs to an ignored port in a loop, under a
//!   bare KVM loop and under Pacer's host mode;
//! - yield through the engine, one vCPU alone on CPU 0: every OUT to the
//!   yield port is an exit plus a `schedule` that picks the same vCPU;
//! - local vCPU switch: two one-vCPU VMs on CPU 0 yield in turn, so every
//!   yield hands the CPU to the other vCPU (threads: a futex hand-off
//!   between two threads on one CPU; workers: the worker swaps vCPUs;
//!   ranked: the yielding thread ranks itself a filler and the other
//!   thread the owner, and the host kernel switches to it).

mod common;

use common::{
    kvm_or_skip, marker_span_ms, pio_loop_code, run_config, tiny_elf, yield_loop_code, TempDir,
};
use vcpu_engine::DispatchKind;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn vm(name: &str, kernel: &std::path::Path) -> String {
    format!(
        "[[vm]]\nname = \"{name}\"\nvcpus = 1\nmemory_mib = 4\nkernel = \"{}\"\ncpus = \"0\"\ntimeout_s = 120\n\n",
        kernel.display()
    )
}

#[test]
fn exit_yield_and_switch_costs() {
    if !kvm_or_skip("exit_yield_and_switch_costs") {
        return;
    }
    const N: u32 = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    let dir = TempDir::new("costs");
    let pio = dir.0.join("pio.elf");
    std::fs::write(&pio, tiny_elf(&pio_loop_code(N))).unwrap();
    let yields = dir.0.join("yield.elf");
    std::fs::write(&yields, tiny_elf(&yield_loop_code(N))).unwrap();
    let per_op = |r: &vmm::results::VmResult, ops: u32| {
        let (a, b) = marker_span_ms(r);
        (b - a) * 1e3 / ops as f64
    };
    let dispatches = [
        DispatchKind::Threads,
        DispatchKind::Workers,
        DispatchKind::Ranked,
    ];
    let mut host = Vec::new();
    let mut alone = vec![Vec::new(); dispatches.len()];
    let mut switch = vec![Vec::new(); dispatches.len()];
    for _ in 0..5 {
        let r = run_config(
            &dir,
            &format!("[host]\npolicy = \"host\"\n\n{}", vm("pio", &pio)),
        );
        host.push(per_op(&r.vms[0], N));
        for (i, dispatch) in dispatches.iter().enumerate() {
            let head = format!("[host]\npolicy = \"haiku\"\ndispatch = \"{dispatch}\"\n\n");
            let r = run_config(&dir, &format!("{head}{}", vm("y", &yields)));
            assert_eq!(r.vms[0].status, "success", "{dispatch}: {:?}", r.vms[0]);
            alone[i].push(per_op(&r.vms[0], N));
            let r = run_config(
                &dir,
                &format!("{head}{}{}", vm("ya", &yields), vm("yb", &yields)),
            );
            let spans: Vec<(f64, f64)> = r.vms.iter().map(marker_span_ms).collect();
            let start = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
            let end = spans.iter().map(|s| s.1).fold(0.0, f64::max);
            for v in &r.vms {
                assert_eq!(v.status, "success", "{dispatch}: {v:?}");
            }
            switch[i].push((end - start) * 1e3 / (2 * N) as f64);
        }
    }
    let host = median(host);
    println!(
        "medians of 5, us per operation ({N} operations):\n\
         exit round trip, host mode (in-kernel irqchip)     {host:.2}"
    );
    let mut default_switch = None;
    for (i, dispatch) in dispatches.iter().enumerate() {
        let (a, s) = (median(alone[i].clone()), median(switch[i].clone()));
        println!(
            "{dispatch:>8}: yield, the same vCPU picked again {a:.2} ({:.2}x exit); \
             local vCPU switch (two vCPUs, one CPU) {s:.2} ({:.2}x exit)",
            a / host,
            s / host
        );
        assert!(a > 0.0 && s > 0.0, "{dispatch}");
        if *dispatch == DispatchKind::default() {
            default_switch = Some(s);
        }
    }
    // The price-of-control table (`ci/measure_engine.sh` gathers the ROW
    // lines): the default dispatch's switch.
    let st = default_switch.expect("the default dispatch is measured");
    println!(
        "ROW|local vCPU switch vs exit round trip ({})|{host:.1} us (exit)|{st:.1} us (switch)|{:.2}x|<= 1.3x",
        DispatchKind::default(),
        st / host
    );
    assert!(host > 0.0);
}
