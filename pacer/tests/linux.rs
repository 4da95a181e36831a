//! The Linux boot path end to end with hand-assembled stand-ins for a
//! vmlinux and a bzImage (skipped without /dev/kvm): an ELF64 with a
//! "Linux" ELF note, and a bzImage (setup header, boot protocol 2.15,
//! XLF_KERNEL_64) whose protected-mode part has the same code at its
//! 64-bit entry (offset 0x200), so Pacer boots both as `guest = "linux"`.
//! The code checks, at the 64-bit entry, what a kernel finds (RSI the zero page with "HdrS", a command
//! line starting with Pacer's `console=`, 3 e820 entries, the initramfs,
//! the RSDP at 0xE0000, the MP floating pointer at 0xF0000), prints a user
//! command block on COM1 and powers off through ACPI PM1a_CNT (S5). A
//! failed check prints its number and resets through the i8042 instead.
//! Under both interrupt controllers: the VM stops with status "poweroff",
//! and the block lands in `<vm>.user.log`. Without an initramfs the same
//! code resets through the i8042 (Linux's `reboot=k`): status "reset", a
//! clean stop. A second stand-in takes COM1's THR-empty interrupt through
//! the I/O APIC and the local APIC as Linux's 8250 driver sets them up,
//! under KVM's in-kernel irqchip (policy host) and Pacer's own (haiku).

mod common;

use common::{
    kvm_or_skip, linux_standin, tiny_vmlinux_of, TempDir, LINUX_STANDIN_BASE as BASE,
    LINUX_STANDIN_CODE as CODE,
};
use std::process::Command;

const MSG: &[u8] = b"UB user begin\nhello from the tiny kernel\nUB user end status=0\n\0";

fn tiny_vmlinux() -> Vec<u8> {
    linux_standin(MSG)
}

/// A bzImage: 4 setup sectors with the setup header, then the
/// protected-mode part (loaded at 1 MiB), whose 64-bit entry at 0x200 is
/// the same code.
fn tiny_bzimage() -> Vec<u8> {
    let setup = 5 * 512;
    let mut b = vec![0u8; setup + 0x200];
    b[0x1F1] = 4; // setup_sects
    b[0x1FE..0x200].copy_from_slice(&[0x55, 0xAA]);
    b[0x202..0x206].copy_from_slice(b"HdrS");
    b[0x206..0x208].copy_from_slice(&0x020Fu16.to_le_bytes());
    b[0x211] = 1; // LOADED_HIGH
    b[0x214..0x218].copy_from_slice(&(BASE as u32).to_le_bytes());
    b[0x22C..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // XLF_KERNEL_64
    b[0x238..0x23C].copy_from_slice(&2047u32.to_le_bytes());
    // 0x200 bytes of the 32-bit entry (never run), then the 64-bit entry.
    b[setup..].fill(0xf4);
    b.extend_from_slice(&CODE);
    b.extend_from_slice(MSG);
    b
}

#[test]
fn tiny_kernels_see_the_boot_protocol_and_power_off() {
    if !kvm_or_skip("tiny_kernels_see_the_boot_protocol_and_power_off") {
        return;
    }
    let dir = TempDir::new("linux");
    std::fs::write(dir.0.join("vmlinux"), tiny_vmlinux()).unwrap();
    std::fs::write(dir.0.join("bzImage"), tiny_bzimage()).unwrap();
    std::fs::write(dir.0.join("initramfs"), [0x5a; 3000]).unwrap();
    for (kernel, policy) in [
        ("vmlinux", "host"),
        ("vmlinux", "haiku"),
        ("bzImage", "host"),
        ("bzImage", "haiku"),
    ] {
        let (r, text) = run(&dir, kernel, policy, "initramfs = \"initramfs\"\n");
        let what = format!("{kernel} under {policy}");
        let vm = &r["runs"][0]["vms"][0];
        assert_eq!(vm["status"], "poweroff", "{what}: {text}");
        assert_eq!(vm["cmdline"], "console=ttyS0 reboot=k quiet");
        let user = std::fs::read_to_string(dir.0.join("logs/latest/tiny.user.log")).unwrap();
        assert_eq!(user, "hello from the tiny kernel\n", "{what}");
        assert!(
            vm["files"]["user"]
                .as_str()
                .is_some_and(|p| p.ends_with("tiny.user.log")),
            "{what}: {vm}"
        );
    }
}

/// Run `kernel` (a file in `dir`) as the 2-vCPU Linux VM "tiny" under
/// `policy`, with `extra` config lines; the results JSON and, for
/// messages, the output and console. The run must exit 0.
fn run(dir: &TempDir, kernel: &str, policy: &str, extra: &str) -> (serde_json::Value, String) {
    let cfg = dir.0.join("linux.toml");
    std::fs::write(
        &cfg,
        format!(
            "[host]\ncpus = \"0-1\"\nlog_dir = \"logs\"\n\n[[vm]]\nname = \"tiny\"\nvcpus = 2\n\
             memory_mib = 64\nkernel = \"{kernel}\"\ncmdline = \"quiet\"\ntimeout_s = 60\n{extra}"
        ),
    )
    .unwrap();
    let json = dir.0.join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(["run", cfg.to_str().unwrap(), "--policy", policy, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let console =
        std::fs::read_to_string(dir.0.join("logs/latest/tiny.console.log")).unwrap_or_default();
    let text = format!(
        "{}{}\nconsole:\n{console}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{kernel} under {policy}: {text}"
    );
    let r = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (r, text)
}

#[test]
fn a_reset_through_the_i8042_stops_a_linux_vm_cleanly() {
    if !kvm_or_skip("a_reset_through_the_i8042_stops_a_linux_vm_cleanly") {
        return;
    }
    // Without an initramfs the tiny kernel's check 4 (ramdisk_image points
    // at the initramfs) fails: it prints "4" and writes 0xFE to port 0x64,
    // as Linux does with reboot=k.
    let dir = TempDir::new("linux-reset");
    std::fs::write(dir.0.join("vmlinux"), tiny_vmlinux()).unwrap();
    for policy in ["host", "haiku"] {
        let (r, text) = run(&dir, "vmlinux", policy, "");
        let vm = &r["runs"][0]["vms"][0];
        assert_eq!(vm["status"], "reset", "{policy}: {text}");
        assert_eq!(vm["ok"], true, "{policy}: {text}");
        let console = std::fs::read_to_string(dir.0.join("logs/latest/tiny.console.log")).unwrap();
        assert_eq!(console, "4\n", "{policy}");
        // No user command ran: the user log is empty and not reported.
        assert!(vm["files"]["user"].is_null(), "{policy}: {vm}");
    }
}

/// 64-bit code that takes COM1's interrupt the way Linux's 8250 driver
/// does (GNU as, then bytes):
///
/// ```text
///     mov $0x70000, %rsp ; mov $0x60000, %edi                  # stack, IDT
///     (IDT entry 0x24: a 64-bit interrupt gate to `handler`, selector 0x10;
///      IDTR at 0x61000, lidt)
///     movl $0xfec0009b, 0x62fb0 ; movl $0xfee0009b, 0x62fb8     # 2 MiB pages over the APICs
///     movl $0x62003, 0xa018 ; mov %cr3, %rax ; mov %rax, %cr3   # PDPT[3]: Pacer maps RAM only
///     mov $0xff, %al ; out %al, $0x21 ; out %al, $0xa1          # mask the 8259s, as Linux does
///     mov $0xfee00000, %eax ; movl $0, 0x80(%rax) ; movl $0x1ff, 0xf0(%rax)   # TPR 0, APIC on
///     mov $0xfec00000, %eax                                     # I/O APIC pin 4:
///     movl $0x19, (%rax) ; movl $0, 0x10(%rax)                  #   to APIC id 0
///     movl $0x18, (%rax) ; movl $0x24, 0x10(%rax)               #   vector 0x24, edge, unmasked
///     mov $0x3fc, %dx ; mov $8, %al ; out %al, %dx              # MCR: OUT2
///     sti ; mov $0x3f9, %dx ; mov $2, %al ; out %al, %dx        # IER: THR empty
///     hlt ; (woken without the handler: print "no interrupt", i8042 reset)
/// handler:
///     mov $0x3fa, %dx ; in %dx, %al ; and $0xf, %al ; cmp $2, %al ; jne bad   # IIR: THR empty
///     mov $0x3f9, %dx ; xor %al, %al ; out %al, %dx             # IER off
///     mov $0xfee00000, %eax ; movl $0, 0xb0(%rax)               # EOI
///     (print msg on COM1) ; mov $0x604, %dx ; mov $0x3401, %ax ; out %ax, %dx ; hlt   # S5
/// bad: (print "IIR is not THR empty", i8042 reset)
/// ```
const IRQ_CODE: [u8; 0x15e] = [
    0x48, 0xc7, 0xc4, 0x00, 0x00, 0x07, 0x00, 0xbf, 0x00, 0x00, 0x06, 0x00, 0x48, 0x8d, 0x05, 0xce,
    0x00, 0x00, 0x00, 0x66, 0x89, 0x87, 0x40, 0x02, 0x00, 0x00, 0x66, 0xc7, 0x87, 0x42, 0x02, 0x00,
    0x00, 0x10, 0x00, 0x66, 0xc7, 0x87, 0x44, 0x02, 0x00, 0x00, 0x00, 0x8e, 0x48, 0xc1, 0xe8, 0x10,
    0x66, 0x89, 0x87, 0x46, 0x02, 0x00, 0x00, 0x48, 0xc1, 0xe8, 0x10, 0x89, 0x87, 0x48, 0x02, 0x00,
    0x00, 0x66, 0xc7, 0x87, 0x00, 0x10, 0x00, 0x00, 0xff, 0x0f, 0x48, 0x89, 0xbf, 0x02, 0x10, 0x00,
    0x00, 0x0f, 0x01, 0x9f, 0x00, 0x10, 0x00, 0x00, 0xc7, 0x04, 0x25, 0xb0, 0x2f, 0x06, 0x00, 0x9b,
    0x00, 0xc0, 0xfe, 0xc7, 0x04, 0x25, 0xb8, 0x2f, 0x06, 0x00, 0x9b, 0x00, 0xe0, 0xfe, 0xc7, 0x04,
    0x25, 0x18, 0xa0, 0x00, 0x00, 0x03, 0x20, 0x06, 0x00, 0x0f, 0x20, 0xd8, 0x0f, 0x22, 0xd8, 0xb0,
    0xff, 0xe6, 0x21, 0xe6, 0xa1, 0xb8, 0x00, 0x00, 0xe0, 0xfe, 0xc7, 0x80, 0x80, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0xc7, 0x80, 0xf0, 0x00, 0x00, 0x00, 0xff, 0x01, 0x00, 0x00, 0xb8, 0x00,
    0x00, 0xc0, 0xfe, 0xc7, 0x00, 0x19, 0x00, 0x00, 0x00, 0xc7, 0x40, 0x10, 0x00, 0x00, 0x00, 0x00,
    0xc7, 0x00, 0x18, 0x00, 0x00, 0x00, 0xc7, 0x40, 0x10, 0x24, 0x00, 0x00, 0x00, 0x66, 0xba, 0xfc,
    0x03, 0xb0, 0x08, 0xee, 0xfb, 0x66, 0xba, 0xf9, 0x03, 0xb0, 0x02, 0xee, 0xf4, 0x48, 0x8d, 0x35,
    0x66, 0x00, 0x00, 0x00, 0xe8, 0x54, 0x00, 0x00, 0x00, 0x66, 0xba, 0x64, 0x00, 0xb0, 0xfe, 0xee,
    0xf4, 0x66, 0xba, 0xfa, 0x03, 0xec, 0x24, 0x0f, 0x3c, 0x02, 0x75, 0x2d, 0x66, 0xba, 0xf9, 0x03,
    0x30, 0xc0, 0xee, 0xb8, 0x00, 0x00, 0xe0, 0xfe, 0xc7, 0x80, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x48, 0x8d, 0x35, 0x55, 0x00, 0x00, 0x00, 0xe8, 0x1f, 0x00, 0x00, 0x00, 0x66, 0xba,
    0x04, 0x06, 0x66, 0xb8, 0x01, 0x34, 0x66, 0xef, 0xf4, 0x48, 0x8d, 0x35, 0x28, 0x00, 0x00, 0x00,
    0xe8, 0x08, 0x00, 0x00, 0x00, 0x66, 0xba, 0x64, 0x00, 0xb0, 0xfe, 0xee, 0xf4, 0x66, 0xba, 0xf8,
    0x03, 0xac, 0x84, 0xc0, 0x74, 0x03, 0xee, 0xeb, 0xf8, 0xc3, 0x6e, 0x6f, 0x20, 0x69, 0x6e, 0x74,
    0x65, 0x72, 0x72, 0x75, 0x70, 0x74, 0x0a, 0x00, 0x49, 0x49, 0x52, 0x20, 0x69, 0x73, 0x20, 0x6e,
    0x6f, 0x74, 0x20, 0x54, 0x48, 0x52, 0x20, 0x65, 0x6d, 0x70, 0x74, 0x79, 0x0a, 0x00,
];
const IRQ_MSG: &[u8] = b"COM1 interrupt: ISA IRQ 4 -> I/O APIC pin 4 -> vector 0x24\n\0";

#[test]
fn com1_interrupts_reach_a_linux_vm_under_both_interrupt_controllers() {
    if !kvm_or_skip("com1_interrupts_reach_a_linux_vm_under_both_interrupt_controllers") {
        return;
    }
    let dir = TempDir::new("linux-irq");
    std::fs::write(dir.0.join("vmlinux"), tiny_vmlinux_of(&IRQ_CODE, IRQ_MSG)).unwrap();
    for policy in ["host", "haiku"] {
        let (r, text) = run(&dir, "vmlinux", policy, "");
        assert_eq!(
            r["runs"][0]["vms"][0]["status"], "poweroff",
            "{policy}: {text}"
        );
        let console = std::fs::read_to_string(dir.0.join("logs/latest/tiny.console.log")).unwrap();
        assert_eq!(
            console.as_bytes(),
            &IRQ_MSG[..IRQ_MSG.len() - 1],
            "{policy}: {text}"
        );
    }
}
