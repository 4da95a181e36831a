//! A hand-assembled multiboot guest boots through `pacer run` (skipped
//! without /dev/kvm): the 32-bit entry state, the multiboot information,
//! fw_cfg and isa-debug-exit, and `--exit-status-from-guest`.

mod common;

use common::{kvm_or_skip, TempDir};
use std::process::Command;

const LOAD: u32 = 0x10_0000;
const MAGIC: u32 = 0x1BAD_B002;
const AOUT_KLUDGE: u32 = 1 << 16;

/// A raw image: a multiboot header with a.out-kludge addresses (load the
/// whole file at 1 MiB, enter right after the header), then 32-bit code:
///
/// ```text
///   cmp eax, 0x2BADB002 ; jne bad      (the boot loader's magic)
///   mov eax, [ebx+4]    ; cmp eax, 640 ; jne bad   (mem_lower)
///   mov ax, 5 ; mov dx, 0x510 ; out dx, ax          (fw_cfg: CPU count)
///   inc edx ; in al, dx ; movzx eax, al
///   out 0xf4, eax ; hlt                 (isa-debug-exit: the CPU count)
/// bad:
///   mov eax, 0x7f ; out 0xf4, eax ; hlt
/// ```
fn image() -> Vec<u8> {
    let mut img = Vec::new();
    for v in [
        MAGIC,
        AOUT_KLUDGE,
        0u32.wrapping_sub(MAGIC.wrapping_add(AOUT_KLUDGE)),
        LOAD,      // header_addr
        LOAD,      // load_addr
        0,         // load_end_addr: the whole file
        0,         // bss_end_addr: no bss
        LOAD + 32, // entry_addr
    ] {
        img.extend_from_slice(&v.to_le_bytes());
    }
    img.extend_from_slice(&[
        0x3d, 0x02, 0xb0, 0xad, 0x2b, 0x75, 0x1c, 0x8b, 0x43, 0x04, 0x3d, 0x80, 0x02, 0x00, 0x00,
        0x75, 0x12, 0x66, 0xb8, 0x05, 0x00, 0x66, 0xba, 0x10, 0x05, 0x66, 0xef, 0x42, 0xec, 0x0f,
        0xb6, 0xc0, 0xe7, 0xf4, 0xf4, 0xb8, 0x7f, 0x00, 0x00, 0x00, 0xe7, 0xf4, 0xf4,
    ]);
    img
}

#[test]
fn multiboot_guest_exits_through_debug_exit_with_its_cpu_count() {
    if !kvm_or_skip("multiboot_guest_exits_through_debug_exit_with_its_cpu_count") {
        return;
    }
    let dir = TempDir::new("multiboot");
    std::fs::write(dir.0.join("mb.bin"), image()).unwrap();
    let cfg = dir.0.join("mb.toml");
    std::fs::write(
        &cfg,
        "[host]\nlog_dir = \"logs\"\n\n[[vm]]\nname = \"mb\"\nvcpus = 3\nmemory_mib = 16\n\
         kernel = \"mb.bin\"\ncmdline = \"a b\"\ntimeout_s = 30\n",
    )
    .unwrap();
    let json = dir.0.join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--exit-status-from-guest",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Wrote 3 (fw_cfg's CPU count): status (3 << 1) | 1.
    assert_eq!(out.status.code(), Some(7), "{text}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let vm = &r["runs"][0]["vms"][0];
    assert_eq!(vm["status"], "debug_exit", "{vm}");
    assert_eq!(vm["exit_status"], 7);
    assert_eq!(vm["ok"], false);
    // The kernel's path, then the configured command line.
    assert!(
        vm["cmdline"].as_str().unwrap().ends_with("mb.bin a b"),
        "{vm}"
    );
}

/// A multiboot guest that raises and lowers pc-testdev's line 4 (port
/// 0x2004) and exits with status 0 through isa-debug-exit:
///
/// ```text
///   mov al, 1 ; mov dx, 0x2004 ; out dx, al ; mov al, 0 ; out dx, al
///   xor eax, eax ; out 0xf4, eax ; hlt
/// ```
fn irq_line_image() -> Vec<u8> {
    let mut img = image();
    img.truncate(32);
    img.extend_from_slice(&[
        0xb0, 0x01, 0x66, 0xba, 0x04, 0x20, 0xee, 0xb0, 0x00, 0xee, 0x31, 0xc0, 0xe7, 0xf4, 0xf4,
    ]);
    img
}

#[test]
fn pc_testdev_lines_work_confined_under_every_interrupt_controller() {
    if !kvm_or_skip("pc_testdev_lines_work_confined_under_every_interrupt_controller") {
        return;
    }
    // Under `host` the vCPU thread sets the line with KVM_IRQ_LINE (KVM's
    // I/O APIC), under `haiku` in Pacer's own: both within its filter.
    let dir = TempDir::new("multiboot-irq");
    std::fs::write(dir.0.join("irq.bin"), irq_line_image()).unwrap();
    for policy in ["host", "haiku"] {
        let cfg = dir.0.join("irq.toml");
        std::fs::write(
            &cfg,
            format!(
                "[host]\npolicy = \"{policy}\"\nlog_dir = \"logs\"\n\n[[vm]]\nname = \"irq\"\n\
                 vcpus = 1\nmemory_mib = 16\nkernel = \"irq.bin\"\ntimeout_s = 30\n"
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_pacer"))
            .args(["run", cfg.to_str().unwrap(), "--exit-status-from-guest"])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains("forbidden system call"), "{policy}: {text}");
        // Wrote 0: status (0 << 1) | 1.
        assert_eq!(out.status.code(), Some(1), "{policy}: {text}");
    }
}
