//! Hand-assembled guests (no bench guest needed): port-I/O exit round trip,
//! unknown-port reads, rejected records, i8042 reset. Print the round trip
//! with `cargo test -p vmm --release --test tiny_guest -- --nocapture`.

mod common;

use common::{kvm_or_skip, pio_loop_code, tiny_elf, TempDir};
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryRegion};
use vmm::config::Config;
use vmm::vm::open_kvm;
use vmm::{boot, memory, Vm, VmOptions};

/// The same guest on a bare KVM loop (no bus, no devices, no state
/// machine): the baseline for Pacer's exit path. Returns us per OUT.
fn raw_kvm_round_trip(kernel: &std::path::Path, n: u32) -> f64 {
    use kvm_ioctls::VcpuExit;
    use std::time::Instant;
    let kvm = open_kvm().unwrap();
    let vm = kvm.create_vm().unwrap();
    let mem = memory::create_guest_memory(4).unwrap();
    for (slot, r) in mem.iter().enumerate() {
        let region = kvm_bindings::kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: r.start_addr().raw_value(),
            memory_size: r.len(),
            userspace_addr: r.as_ptr() as u64,
        };
        // SAFETY: `mem` outlives `vm` in this function; slots do not overlap.
        unsafe { vm.set_user_memory_region(region) }.unwrap();
    }
    let mut vcpu = vm.create_vcpu(0).unwrap();
    vcpu.set_cpuid2(
        &kvm.get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
            .unwrap(),
    )
    .unwrap();
    let k = boot::elf::load_kernel(&mem, kernel, None).unwrap();
    let cl = boot::elf::build_cmdline("", 1, 1).unwrap();
    boot::elf::write_boot_structures(&mem, &cl, &k).unwrap();
    vcpu.set_regs(&boot::regs::long_mode_regs(k.entry, 0))
        .unwrap();
    let mut sregs = vcpu.get_sregs().unwrap();
    boot::regs::long_mode_sregs(&mut sregs);
    vcpu.set_sregs(&sregs).unwrap();
    let (mut t1, mut t4) = (None, None);
    loop {
        match vcpu.run().unwrap() {
            VcpuExit::IoOut(0xE00, d) if d[0] == 1 => t1 = Some(Instant::now()),
            VcpuExit::IoOut(0xE00, d) if d[0] == 4 => t4 = Some(Instant::now()),
            VcpuExit::IoOut(0xE08, _) => break,
            VcpuExit::IoIn(_, d) => d.fill(0xff),
            _ => {}
        }
    }
    t4.unwrap().duration_since(t1.unwrap()).as_secs_f64() * 1e6 / n as f64
}

fn run_tiny(dir: &TempDir, n: u32) -> vmm::results::VmResult {
    let kernel = dir.0.join(format!("pio-{n}.elf"));
    std::fs::write(&kernel, tiny_elf(&pio_loop_code(n))).unwrap();
    let cfg = dir.config(&format!(
        "[[vm]]\nname = \"pio\"\nvcpus = 1\nmemory_mib = 4\nkernel = \"{}\"\ntimeout_s = 60\n",
        kernel.display()
    ));
    let config = Config::load(&cfg).unwrap();
    let kvm = open_kvm().unwrap();
    Vm::run(
        &kvm,
        &config.vms[0].spec(),
        VmOptions {
            log_dir: None,
            ..Default::default()
        },
    )
}

#[test]
fn pio_exit_round_trip_and_bad_guest_input() {
    if !kvm_or_skip("pio_exit_round_trip_and_bad_guest_input") {
        return;
    }
    let dir = TempDir::new("pio");
    // Fewer exits in debug builds keep `cargo test` short; measure with --release.
    const N: u32 = if cfg!(debug_assertions) {
        5_000
    } else {
        20_000
    };
    let r = run_tiny(&dir, N);
    // The unknown port read 0xff, which the guest used as its exit status;
    // the out-of-RAM record was rejected without stopping the VM.
    assert_eq!(r.status, "guest_exit", "{r:?}");
    assert!(r.message.contains("status 255"), "{}", r.message);
    assert_eq!(r.rejected_records, 1);
    let per_exit = |r: &vmm::results::VmResult| {
        let t = |name: &str| {
            r.markers
                .iter()
                .find(|m| m.marker == name)
                .unwrap_or_else(|| panic!("{name} missing: {r:?}"))
                .t_ms
        };
        (t("workload_done") - t("first_instruction")) * 1e3 / N as f64
    };
    let mut pacer = vec![per_exit(&r)];
    // Alternate Pacer and a bare KVM loop on the same guest: this machine is
    // small and noisy, so compare side by side (min and median of 5 each).
    let kernel = dir.0.join(format!("pio-{N}.elf"));
    let mut bare = Vec::new();
    for _ in 0..5 {
        bare.push(raw_kvm_round_trip(&kernel, N));
        pacer.push(per_exit(&run_tiny(&dir, N)));
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[0], v[v.len() / 2])
    };
    let (p_min, p_med) = stats(&mut pacer);
    let (b_min, b_med) = stats(&mut bare);
    println!(
        "port-I/O exit round trip (OUT to an ignored port, incl. 2 emulated loop instructions, mean over {N}): \
         Pacer (in-kernel irqchip, host mode) min {p_min:.2} us median {p_med:.2} us; \
         bare KVM loop (no irqchip) min {b_min:.2} us median {b_med:.2} us; \
         Pacer/bare (min) {:.2}",
        p_min / b_min
    );
    assert!(p_min > 0.0 && b_min > 0.0);
}

#[test]
fn i8042_reset_stops_the_vm_cleanly() {
    if !kvm_or_skip("i8042_reset_stops_the_vm_cleanly") {
        return;
    }
    let dir = TempDir::new("reset");
    // mov al, 0xfe; out 0x64, al; hlt
    let kernel = dir.0.join("reset.elf");
    std::fs::write(&kernel, tiny_elf(&[0xb0, 0xfe, 0xe6, 0x64, 0xf4])).unwrap();
    let cfg = dir.config(&format!(
        "[[vm]]\nname = \"rst\"\nvcpus = 1\nmemory_mib = 4\nkernel = \"{}\"\ntimeout_s = 30\n",
        kernel.display()
    ));
    let config = Config::load(&cfg).unwrap();
    let r = Vm::run(
        &open_kvm().unwrap(),
        &config.vms[0].spec(),
        VmOptions {
            log_dir: None,
            ..Default::default()
        },
    );
    assert_eq!(r.status, "reset", "{r:?}");
    assert!(r.ok);
}
