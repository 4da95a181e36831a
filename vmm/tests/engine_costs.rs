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
//!   between two threads on one CPU; workers: the worker swaps vCPUs).

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
    let (mut host, mut alone_t, mut alone_w, mut switch_t, mut switch_w) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..5 {
        let r = run_config(
            &dir,
            &format!("[host]\npolicy = \"host\"\n\n{}", vm("pio", &pio)),
        );
        host.push(per_op(&r.vms[0], N));
        for (dispatch, alone, switch) in [
            (DispatchKind::Threads, &mut alone_t, &mut switch_t),
            (DispatchKind::Workers, &mut alone_w, &mut switch_w),
        ] {
            let head = format!("[host]\npolicy = \"haiku\"\ndispatch = \"{dispatch}\"\n\n");
            let r = run_config(&dir, &format!("{head}{}", vm("y", &yields)));
            assert_eq!(r.vms[0].status, "success", "{:?}", r.vms[0]);
            alone.push(per_op(&r.vms[0], N));
            let r = run_config(
                &dir,
                &format!("{head}{}{}", vm("ya", &yields), vm("yb", &yields)),
            );
            let spans: Vec<(f64, f64)> = r.vms.iter().map(marker_span_ms).collect();
            let start = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
            let end = spans.iter().map(|s| s.1).fold(0.0, f64::max);
            for v in &r.vms {
                assert_eq!(v.status, "success", "{v:?}");
            }
            switch.push((end - start) * 1e3 / (2 * N) as f64);
        }
    }
    let (host, at, aw, st, sw) = (
        median(host),
        median(alone_t),
        median(alone_w),
        median(switch_t),
        median(switch_w),
    );
    println!(
        "medians of 5, us per operation ({N} operations):\n\
         exit round trip, host mode (in-kernel irqchip)     {host:.2}\n\
         yield, engine re-picks the same vCPU  threads {at:.2} ({:.2}x exit)  workers {aw:.2} ({:.2}x exit)\n\
         local vCPU switch (two vCPUs, one CPU) threads {st:.2} ({:.2}x exit)  workers {sw:.2} ({:.2}x exit)",
        at / host,
        aw / host,
        st / host,
        sw / host
    );
    // The price-of-control table (`ci/measure_engine.sh` gathers the ROW lines).
    println!(
        "ROW|local vCPU switch vs exit round trip|{host:.1} us (exit)|{st:.1} us (switch)|{:.2}x|<= 1.3x",
        st / host
    );
    assert!(host > 0.0 && at > 0.0 && st > 0.0);
}
