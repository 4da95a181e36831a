//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod kvm_gate;

/// True if /dev/kvm can be opened; otherwise prints the SKIPPED line, or
/// panics when `PACER_REQUIRE_KVM=1` (`kvm_gate.rs`).
pub fn kvm_or_skip(test: &str) -> bool {
    let open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| e.to_string());
    kvm_gate::kvm_gate_here(test, open)
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("pacer-it-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Write `pacer.toml` with `text` (`@KERNEL@` replaced by the bench guest).
    pub fn config(&self, text: &str) -> PathBuf {
        let p = self.0.join("pacer.toml");
        let text = text.replace("@KERNEL@", &kernel().display().to_string());
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn kernel() -> PathBuf {
    guests::bench_guest_elf().to_path_buf()
}

/// Write `text` as the config (see [`TempDir::config`]), validate it and
/// run every VM to completion through the runner (no output).
pub fn run_config(dir: &TempDir, text: &str) -> vmm::results::RunResults {
    let config = vmm::config::Config::load(&dir.config(text)).unwrap_or_else(|e| panic!("{e}"));
    let opts = vmm::runner::RunOptions {
        run_start: std::time::Instant::now(),
        status: false,
        trace: None,
        api: Default::default(),
    };
    vmm::runner::run(&config, &opts, &|_| {}).unwrap()
}

/// A `[[vm]]` table running the bench guest.
pub fn vm_table(name: &str, workload: &str) -> String {
    format!(
        "[[vm]]\nname = \"{name}\"\nvcpus = 1\nmemory_mib = 32\nkernel = \"@KERNEL@\"\nworkload = \"{workload}\"\ntimeout_s = 60\n\n"
    )
}

/// The 64-byte header of an x86-64 ELF executable entered at `entry`, with
/// `phnum` program headers right after it and no sections.
pub fn elf64_header(entry: u64, phnum: u16) -> Vec<u8> {
    let (ehsize, phsize) = (64u16, 56u16);
    let mut e = Vec::new();
    e.extend_from_slice(b"\x7fELF");
    e.extend_from_slice(&[2, 1, 1, 0]); // 64-bit, little endian, v1, SysV
    e.extend_from_slice(&[0; 8]);
    e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    e.extend_from_slice(&1u32.to_le_bytes());
    e.extend_from_slice(&entry.to_le_bytes()); // e_entry
    e.extend_from_slice(&u64::from(ehsize).to_le_bytes()); // e_phoff
    e.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    e.extend_from_slice(&ehsize.to_le_bytes());
    e.extend_from_slice(&phsize.to_le_bytes());
    e.extend_from_slice(&phnum.to_le_bytes());
    e.extend_from_slice(&64u16.to_le_bytes()); // e_shentsize
    e.extend_from_slice(&0u16.to_le_bytes()); // e_shnum
    e.extend_from_slice(&0u16.to_le_bytes()); // e_shstrndx
    e
}

/// A minimal ELF64 executable: `code` loaded at 1 MiB physical, entry at its
/// first byte (a hand-assembled test guest; no toolchain needed).
pub fn tiny_elf(code: &[u8]) -> Vec<u8> {
    const BASE: u64 = 0x10_0000;
    let ehsize = 64u64;
    let phsize = 56u64;
    let off = ehsize + phsize;
    let mut e = elf64_header(BASE, 1);
    // PT_LOAD, R+X
    e.extend_from_slice(&1u32.to_le_bytes());
    e.extend_from_slice(&5u32.to_le_bytes());
    e.extend_from_slice(&off.to_le_bytes()); // p_offset
    e.extend_from_slice(&BASE.to_le_bytes()); // p_vaddr
    e.extend_from_slice(&BASE.to_le_bytes()); // p_paddr
    e.extend_from_slice(&(code.len() as u64).to_le_bytes()); // p_filesz
    e.extend_from_slice(&(code.len() as u64).to_le_bytes()); // p_memsz
    e.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    e.extend_from_slice(code);
    e
}

/// Machine code: marker 1, `n` OUTs to port 0xE01 (claimed and ignored by
/// the result port), marker 4, a record address outside RAM on 0xE04, an IN
/// from unknown port 0x99, and that byte (0xff) as the exit status on 0xE08.
pub fn pio_loop_code(n: u32) -> Vec<u8> {
    let mut c = vec![
        0xb0, 0x01, // mov al, 1
        0x66, 0xba, 0x00, 0x0e, // mov dx, 0xE00
        0xee, // out dx, al
        0xb9, // mov ecx, imm32
    ];
    c.extend_from_slice(&n.max(1).to_le_bytes());
    c.extend_from_slice(&[
        0x66, 0xba, 0x01, 0x0e, // mov dx, 0xE01
        0xee, // loop: out dx, al
        0xff, 0xc9, // dec ecx
        0x75, 0xfb, // jnz loop
        0xb0, 0x04, // mov al, 4
        0x66, 0xba, 0x00, 0x0e, // mov dx, 0xE00
        0xee, // out dx, al
        0xb8, 0xf0, 0xff, 0xff, 0xff, // mov eax, 0xfffffff0
        0x66, 0xba, 0x04, 0x0e, // mov dx, 0xE04
        0xef, // out dx, eax
        0x31, 0xc0, // xor eax, eax
        0xe4, 0x99, // in al, 0x99
        0x66, 0xba, 0x08, 0x0e, // mov dx, 0xE08
        0xef, // out dx, eax
        0xf4, // hlt
    ]);
    c
}

/// Machine code: marker 1, `n` OUTs to the yield port 0xE0C (each one a
/// voluntary yield under Pacer's engine), marker 4, exit status 0.
pub fn yield_loop_code(n: u32) -> Vec<u8> {
    let mut c = vec![
        0xb0, 0x01, // mov al, 1
        0x66, 0xba, 0x00, 0x0e, // mov dx, 0xE00
        0xee, // out dx, al
        0xb9, // mov ecx, imm32
    ];
    c.extend_from_slice(&n.max(1).to_le_bytes());
    c.extend_from_slice(&[
        0x66, 0xba, 0x0c, 0x0e, // mov dx, 0xE0C
        0xee, // loop: out dx, al
        0xff, 0xc9, // dec ecx
        0x75, 0xfb, // jnz loop
        0xb0, 0x04, // mov al, 4
        0x66, 0xba, 0x00, 0x0e, // mov dx, 0xE00
        0xee, // out dx, al
        0x31, 0xc0, // xor eax, eax
        0x66, 0xba, 0x08, 0x0e, // mov dx, 0xE08
        0xef, // out dx, eax
        0xf4, // hlt
    ]);
    c
}

/// Host milliseconds between marker 1 and marker 4 of a VM result.
pub fn marker_span_ms(r: &vmm::results::VmResult) -> (f64, f64) {
    let t = |name: &str| {
        r.markers
            .iter()
            .find(|m| m.marker == name)
            .unwrap_or_else(|| panic!("{name} missing: {r:?}"))
            .t_run_ms
    };
    (t("first_instruction"), t("workload_done"))
}

/// Where the Linux stand-in loads (1 MiB).
pub const LINUX_STANDIN_BASE: u64 = 0x10_0000;

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
pub const LINUX_STANDIN_CODE: [u8; 0x92] = [
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

/// An ELF64 x86-64 executable: one PT_LOAD (`code` + `msg` at 1 MiB,
/// entry at its first byte) and one PT_NOTE with a "Linux" note.
pub fn tiny_vmlinux_of(code: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut note = Vec::new();
    note.extend_from_slice(&6u32.to_le_bytes()); // namesz ("Linux\0")
    note.extend_from_slice(&4u32.to_le_bytes()); // descsz
    note.extend_from_slice(&0x100u32.to_le_bytes()); // LINUX_ELFNOTE_BUILD_SALT
    note.extend_from_slice(b"Linux\0\0\0");
    note.extend_from_slice(b"6.1\0");
    let mut load = code.to_vec();
    load.extend_from_slice(msg);

    let (ehsize, phsize) = (64u64, 56u64);
    let load_off = ehsize + 2 * phsize;
    let note_off = load_off + load.len() as u64;
    let mut e = elf64_header(LINUX_STANDIN_BASE, 2);
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
    phdr(
        &mut e,
        1,
        5,
        load_off,
        LINUX_STANDIN_BASE,
        load.len() as u64,
    );
    phdr(&mut e, 4, 4, note_off, 0, note.len() as u64);
    e.extend_from_slice(&load);
    e.extend_from_slice(&note);
    e
}

/// The Linux stand-in printing `msg` (NUL-terminated) on COM1 after its
/// boot-protocol checks, then powering off (it needs an initramfs whose
/// first byte is 0x5A).
pub fn linux_standin(msg: &[u8]) -> Vec<u8> {
    tiny_vmlinux_of(&LINUX_STANDIN_CODE, msg)
}
