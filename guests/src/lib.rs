//! Pacer's guest images.
//!
//! The bench guest (`guests/bench`, protocol in `guests/PROTOCOL.md`) and
//! the Linux guest's UnixBench-style suite (`guests/linux/suite`) are
//! built by `build.rs` with gcc into Cargo's `OUT_DIR`; these functions
//! return the paths of the built files. `guests/build.sh` builds the bench
//! guest into `guests/out/`, `guests/linux/build.sh` the Linux image into
//! `guests/out/linux/` (with the `mkinitramfs` and `extract-vmlinux`
//! binaries of this crate, over the [`cpio`], [`initramfs`] and
//! [`bzimage`] modules).

use std::path::Path;

pub mod bzimage;
pub mod cpio;
pub mod initramfs;

/// The bench guest kernel + ring-3 workloads: an ELF64 image linked at
/// 1 MiB physical, booted through its 64-bit entry (PROTOCOL.md).
pub fn bench_guest_elf() -> &'static Path {
    Path::new(env!("PACER_BENCH_GUEST_ELF"))
}

/// Host build of the guest's work unit (`guests/bench/src/work.c`, same
/// flags): `host_work [duration_ms]` prints `units=.. seconds=.. units_per_s=..`,
/// the host baseline for the guest's WORK_DONE units/s.
pub fn host_work() -> &'static Path {
    Path::new(env!("PACER_HOST_WORK"))
}

/// The UnixBench-style suite (`guests/linux/suite`), a static x86-64
/// binary that runs on the host as it does in the guest: `ubench run
/// --seconds 0.1 --passes 1` prints `UB ...` result lines.
pub fn ubench() -> &'static Path {
    Path::new(env!("PACER_UBENCH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_guest_is_elf64_linked_at_1mib() {
        let img = std::fs::read(bench_guest_elf()).expect("bench guest built");
        assert_eq!(&img[0..4], b"\x7fELF");
        assert_eq!(img[4], 2, "ELFCLASS64");
        assert_eq!(u16::from_le_bytes([img[18], img[19]]), 62, "EM_X86_64");
        let entry = u64::from_le_bytes(img[24..32].try_into().unwrap());
        assert!((0x10_0000..0x20_0000).contains(&entry), "entry {entry:#x}");
    }

    #[test]
    fn bench_guest_has_a_pvh_entry_note() {
        // A PT_NOTE segment holding the Xen note XEN_ELFNOTE_PHYS32_ENTRY
        // (18) whose 32-bit address lies in the kernel below 2 MiB: what
        // QEMU's `-kernel` looks for to boot an ELF through the PVH entry.
        let img = std::fs::read(bench_guest_elf()).expect("bench guest built");
        let u16_at = |o: usize| u16::from_le_bytes(img[o..o + 2].try_into().unwrap()) as usize;
        let u32_at = |o: usize| u32::from_le_bytes(img[o..o + 4].try_into().unwrap()) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().unwrap()) as usize;
        let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
        let note = (0..phnum)
            .map(|i| phoff + i * phentsize)
            .find(|&ph| u32_at(ph) == 4) // PT_NOTE
            .expect("a PT_NOTE segment");
        let (off, size) = (u64_at(note + 8), u64_at(note + 32));
        let mut n = off;
        let mut entry = None;
        while n + 12 <= off + size {
            let (namesz, descsz, ty) = (u32_at(n), u32_at(n + 4), u32_at(n + 8));
            let name = &img[n + 12..n + 12 + namesz];
            let desc = n + 12 + namesz.div_ceil(4) * 4;
            if name == b"Xen\0" && ty == 18 && descsz >= 4 {
                entry = Some(u32_at(desc));
            }
            n = desc + descsz.div_ceil(4) * 4;
        }
        let entry = entry.expect("XEN_ELFNOTE_PHYS32_ENTRY");
        assert!(
            (0x10_0000..0x20_0000).contains(&entry),
            "PVH entry {entry:#x}"
        );
    }

    #[test]
    fn host_work_runs() {
        let out = std::process::Command::new(host_work())
            .arg("20")
            .output()
            .expect("run host_work");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("units_per_s="), "{text}");
    }

    #[test]
    fn ubench_cmdline_reads_kernel_parameters() {
        let dir = std::env::temp_dir().join(format!("pacer-cmdline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cmdline");
        std::fs::write(
            &file,
            "console=ttyS0 ub.passes=3 ub.user_cmd=\"./Run -c 2 dhry2reg\" ub.flag ub.passes=1,1\n",
        )
        .unwrap();
        let get = |key: &str| {
            let out = std::process::Command::new(ubench())
                .args(["cmdline", key])
                .arg(&file)
                .output()
                .expect("run ubench");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        assert_eq!(
            get("ub.user_cmd"),
            (Some(0), "./Run -c 2 dhry2reg\n".into())
        );
        assert_eq!(
            get("ub.passes"),
            (Some(0), "1,1\n".into()),
            "the last one wins"
        );
        assert_eq!(get("ub.flag"), (Some(0), "\n".into()));
        assert_eq!(get("console"), (Some(0), "ttyS0\n".into()));
        assert_eq!(get("ub.pass"), (Some(1), String::new()), "no prefix match");
        assert_eq!(get("ub.tests"), (Some(1), String::new()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
