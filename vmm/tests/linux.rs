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
//! and the block lands in `<vm>.user.log`.

mod common;

use common::{kvm_or_skip, TempDir};
use std::process::Command;

const BASE: u64 = 0x10_0000;

/// 64-bit code (GNU as, then bytes):
///
/// ```text
///     mov $'1', %bl ; cmpl $0x53726448, 0x202(%rsi) ; jne fail     # "HdrS"
///     mov $'2', %bl ; mov 0x228(%rsi), %eax                        # cmd_line_ptr
///     movabs $"console=", %rcx ; cmp %rcx, (%rax) ; jne fail
///     mov $'3', %bl ; cmpb $3, 0x1e8(%rsi) ; jne fail              # e820_entries
///     mov $'4', %bl ; mov 0x218(%rsi), %eax ; cmpb $0x5a, (%rax) ; jne fail   # ramdisk_image
///     mov $'5', %bl ; movabs $"RSD PTR ", %rcx ; cmp %rcx, 0xe0000 ; jne fail
///     mov $'6', %bl ; cmpl $"_MP_", 0xf0000 ; jne fail
///     lea msg(%rip), %rsi ; mov $0x3f8, %dx
/// 1:  lodsb ; test %al, %al ; jz 2f ; out %al, %dx ; jmp 1b       # the message on COM1
/// 2:  mov $0x604, %dx ; mov $0x3401, %ax ; out %ax, %dx ; hlt     # SLP_TYP 5 | SLP_EN | SCI_EN
/// fail:
///     mov $0x3f8, %dx ; mov %bl, %al ; out %al, %dx ; mov $10, %al ; out %al, %dx
///     mov $0x64, %dx ; mov $0xfe, %al ; out %al, %dx ; hlt        # i8042 reset
/// msg:
/// ```
const CODE: [u8; 0x92] = [
    0xb3, 0x31, 0x81, 0xbe, 0x02, 0x02, 0x00, 0x00, 0x48, 0x64, 0x72, 0x53, 0x75, 0x72, 0xb3, 0x32,
    0x8b, 0x86, 0x28, 0x02, 0x00, 0x00, 0x48, 0xb9, 0x63, 0x6f, 0x6e, 0x73, 0x6f, 0x6c, 0x65, 0x3d,
    0x48, 0x39, 0x08, 0x75, 0x5b, 0xb3, 0x33, 0x80, 0xbe, 0xe8, 0x01, 0x00, 0x00, 0x03, 0x75, 0x50,
    0xb3, 0x34, 0x8b, 0x86, 0x18, 0x02, 0x00, 0x00, 0x80, 0x38, 0x5a, 0x75, 0x43, 0xb3, 0x35, 0x48,
    0xb9, 0x52, 0x53, 0x44, 0x20, 0x50, 0x54, 0x52, 0x20, 0x48, 0x39, 0x0c, 0x25, 0x00, 0x00, 0x0e,
    0x00, 0x75, 0x2d, 0xb3, 0x36, 0x81, 0x3c, 0x25, 0x00, 0x00, 0x0f, 0x00, 0x5f, 0x4d, 0x50, 0x5f,
    0x75, 0x1e, 0x48, 0x8d, 0x35, 0x29, 0x00, 0x00, 0x00, 0x66, 0xba, 0xf8, 0x03, 0xac, 0x84, 0xc0,
    0x74, 0x03, 0xee, 0xeb, 0xf8, 0x66, 0xba, 0x04, 0x06, 0x66, 0xb8, 0x01, 0x34, 0x66, 0xef, 0xf4,
    0x66, 0xba, 0xf8, 0x03, 0x88, 0xd8, 0xee, 0xb0, 0x0a, 0xee, 0x66, 0xba, 0x64, 0x00, 0xb0, 0xfe,
    0xee, 0xf4,
];
const MSG: &[u8] = b"UB user begin\nhello from the tiny kernel\nUB user end status=0\n\0";

/// An ELF64 x86-64 executable: one PT_LOAD (code + message at 1 MiB,
/// entry at its first byte) and one PT_NOTE with a "Linux" note.
fn tiny_vmlinux() -> Vec<u8> {
    let mut note = Vec::new();
    note.extend_from_slice(&6u32.to_le_bytes()); // namesz ("Linux\0")
    note.extend_from_slice(&4u32.to_le_bytes()); // descsz
    note.extend_from_slice(&0x100u32.to_le_bytes()); // LINUX_ELFNOTE_BUILD_SALT
    note.extend_from_slice(b"Linux\0\0\0");
    note.extend_from_slice(b"6.1\0");
    let mut load = CODE.to_vec();
    load.extend_from_slice(MSG);

    let (ehsize, phsize) = (64u64, 56u64);
    let load_off = ehsize + 2 * phsize;
    let note_off = load_off + load.len() as u64;
    let mut e = Vec::new();
    e.extend_from_slice(b"\x7fELF");
    e.extend_from_slice(&[2, 1, 1, 0]);
    e.extend_from_slice(&[0; 8]);
    e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    e.extend_from_slice(&1u32.to_le_bytes());
    e.extend_from_slice(&BASE.to_le_bytes()); // e_entry
    e.extend_from_slice(&ehsize.to_le_bytes()); // e_phoff
    e.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    e.extend_from_slice(&(ehsize as u16).to_le_bytes());
    e.extend_from_slice(&(phsize as u16).to_le_bytes());
    e.extend_from_slice(&2u16.to_le_bytes()); // e_phnum
    e.extend_from_slice(&64u16.to_le_bytes());
    e.extend_from_slice(&0u16.to_le_bytes());
    e.extend_from_slice(&0u16.to_le_bytes());
    let phdr = |e: &mut Vec<u8>, kind: u32, flags: u32, off: u64, addr: u64, size: u64| {
        e.extend_from_slice(&kind.to_le_bytes());
        e.extend_from_slice(&flags.to_le_bytes());
        e.extend_from_slice(&off.to_le_bytes());
        e.extend_from_slice(&addr.to_le_bytes());
        e.extend_from_slice(&addr.to_le_bytes());
        e.extend_from_slice(&size.to_le_bytes());
        e.extend_from_slice(&size.to_le_bytes());
        e.extend_from_slice(&(if kind == 1 { 0x1000u64 } else { 4 }).to_le_bytes());
    };
    phdr(&mut e, 1, 5, load_off, BASE, load.len() as u64);
    phdr(&mut e, 4, 4, note_off, 0, note.len() as u64);
    e.extend_from_slice(&load);
    e.extend_from_slice(&note);
    e
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
        let cfg = dir.0.join("linux.toml");
        std::fs::write(
            &cfg,
            format!(
                "[host]\ncpus = \"0-1\"\nlog_dir = \"logs\"\n\n[[vm]]\nname = \"tiny\"\nvcpus = 2\n\
                 memory_mib = 64\nkernel = \"{kernel}\"\ninitramfs = \"initramfs\"\ncmdline = \"quiet\"\n\
                 timeout_s = 60\n"
            ),
        )
        .unwrap();
        let what = format!("{kernel} under {policy}");
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
        assert_eq!(out.status.code(), Some(0), "{what}: {text}");
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let vm = &r["vms"][0];
        assert_eq!(vm["status"], "poweroff", "{what}: {text}");
        assert_eq!(vm["cmdline"], "console=ttyS0 reboot=k quiet");
        let user = std::fs::read_to_string(dir.0.join("logs/latest/tiny.user.log")).unwrap();
        assert_eq!(user, "hello from the tiny kernel\n", "{what}");
        assert!(
            vm["user_log"]
                .as_str()
                .is_some_and(|p| p.ends_with("tiny.user.log")),
            "{what}: {vm}"
        );
    }
}
