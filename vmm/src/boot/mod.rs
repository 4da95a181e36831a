//! Booting a guest: recognise the kernel's format, load it with what its
//! boot protocol needs, and give each vCPU its entry state.
//!
//! | format | guest kind | loader | entry |
//! |---|---|---|---|
//! | ELF64 x86-64 | `bench` (default) | `elf.rs`: PT_LOADs, zero page, page tables | 64-bit long mode (`regs.rs`) |
//! | ELF32 or raw binary with a multiboot v1 header | `multiboot` (default) | `multiboot.rs` (+ `acpi.rs`) | 32-bit protected mode |
//! | bzImage | `linux` (default) | `linux.rs`: 64-bit boot protocol, `zero_page.rs`, `acpi.rs` + `madt.rs`, `mptable.rs` | 64-bit long mode at the bzImage's 64-bit entry |
//! | ELF64 x86-64 with a "Linux" ELF note (a vmlinux) | `linux` (default) | the same | 64-bit long mode at `startup_64` (the ELF entry) |
//!
//! [`inspect`] reads the start of the file, and an ELF64's notes
//! (`notes.rs`: what tells a vmlinux from the bench guest); config
//! validation uses it, so a wrong kernel is a validation error (exit code
//! 2). [`load`] puts everything in guest memory and returns the
//! [`EntryState`]; [`vm_cpuid`] gives the CPUID every vCPU of a VM starts
//! from, and [`configure_vcpu`] sets a vCPU's CPUID, MSRs and registers.
//! Addresses of every boot structure: `layout.rs`.

pub mod acpi;
pub mod elf;
pub mod layout;
pub mod linux;
pub mod madt;
pub mod mptable;
pub mod multiboot;
pub mod notes;
pub mod regs;
pub mod vcpu;
pub mod zero_page;

pub use vcpu::{configure_vcpu, vm_cpuid, VcpuBoot};

use multiboot::{Module, MultibootError, MultibootHeader};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Format { path: String, reason: String },
    #[error("cannot load ELF kernel {path}: {source}")]
    LoadKernel {
        path: String,
        source: linux_loader::loader::Error,
    },
    #[error("multiboot kernel {path}: {source}")]
    Multiboot {
        path: String,
        source: MultibootError,
    },
    #[error("initrd {path} ({size} bytes) does not fit in guest RAM")]
    InitrdTooBig { path: String, size: u64 },
    #[error("cannot load initrd {path}: {reason}")]
    LoadInitrd { path: String, reason: String },
    #[error("kernel command line: {0}")]
    Cmdline(#[from] linux_loader::cmdline::Error),
    #[error("cannot write the command line: {0}")]
    WriteCmdline(linux_loader::loader::Error),
    #[error("cannot write boot_params: {0}")]
    BootParams(linux_loader::configurator::Error),
    #[error("cannot write {what} to guest memory: {source}")]
    Write {
        what: &'static str,
        source: vm_memory::GuestMemoryError,
    },
    #[error("guest RAM too small for the boot structures ({0:#x} bytes)")]
    TooSmall(u64),
    #[error("CPUID: {0}")]
    Cpuid(#[from] crate::cpuid::CpuidError),
    #[error("setting vCPU state ({what}) failed: {source}")]
    Regs {
        what: &'static str,
        source: kvm_ioctls::Error,
    },
}

/// What kind of guest a VM runs: decides the boot protocol, the command
/// line, and the devices the VM gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuestKind {
    /// The bench guest (guests/PROTOCOL.md): direct 64-bit ELF entry, the
    /// command line built from `workload` plus `tsc_khz=`/`vcpus=`.
    Bench,
    /// A multiboot v1 kernel (e.g. kvm-unit-tests): 32-bit entry, the
    /// user's command line and modules, QEMU's test devices (isa-debug-exit,
    /// fw_cfg, pc-testdev, ACPI PM timer).
    Multiboot,
    /// A Linux kernel, bzImage or vmlinux: the 64-bit boot protocol, the
    /// user's command line after Pacer's (`linux.rs`), an initramfs, ACPI
    /// and MP tables, the ACPI power-off registers.
    Linux,
}

impl GuestKind {
    pub fn name(&self) -> &'static str {
        match self {
            GuestKind::Bench => "bench",
            GuestKind::Multiboot => "multiboot",
            GuestKind::Linux => "linux",
        }
    }
}

/// The container format of a kernel file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFormat {
    Elf64X86_64,
    /// Any other ELF (class, machine) pair.
    OtherElf {
        class: u8,
        machine: u16,
    },
    BzImage,
    /// Not ELF, not bzImage (a raw binary; bootable only with a multiboot
    /// header carrying a.out-kludge addresses).
    Raw,
}

/// What [`inspect`] learned about a kernel file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelInfo {
    pub format: KernelFormat,
    pub multiboot: Option<MultibootHeader>,
    /// An ELF64's notes (default for other formats).
    pub notes: notes::ElfNotes,
}

/// bzImage: 0xAA55 at 0x1FE and "HdrS" at 0x202 (Linux boot protocol).
fn is_bzimage(b: &[u8]) -> bool {
    b.get(0x1fe..0x200) == Some(&[0x55, 0xaa]) && b.get(0x202..0x206) == Some(b"HdrS")
}

/// Recognise the format of the kernel bytes `head` (at least the first
/// 8 KiB of the file, or all of it).
pub fn inspect_bytes(head: &[u8]) -> Result<KernelInfo, MultibootError> {
    let format = if head.get(0..4) == Some(b"\x7fELF") && head.len() >= 20 {
        let class = head[4];
        let machine = u16::from_le_bytes([head[18], head[19]]);
        if class == 2 && head[5] == 1 && machine == 62 {
            KernelFormat::Elf64X86_64
        } else {
            KernelFormat::OtherElf { class, machine }
        }
    } else if is_bzimage(head) {
        KernelFormat::BzImage
    } else {
        KernelFormat::Raw
    };
    let notes = match format {
        KernelFormat::Elf64X86_64 => notes::scan_bytes(head),
        _ => notes::ElfNotes::default(),
    };
    Ok(KernelInfo {
        format,
        multiboot: multiboot::find_header(head)?,
        notes,
    })
}

/// Read the start of `path` (and an ELF64's notes) and recognise its
/// format.
pub fn inspect(path: &Path) -> Result<KernelInfo, BootError> {
    let name = path.display().to_string();
    let open_err = |source| BootError::Open {
        path: name.clone(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(open_err)?;
    let mut head = Vec::with_capacity(multiboot::MULTIBOOT_SEARCH_LIMIT);
    (&mut file)
        .take(multiboot::MULTIBOOT_SEARCH_LIMIT as u64)
        .read_to_end(&mut head)
        .map_err(open_err)?;
    let mut info = inspect_bytes(&head).map_err(|source| BootError::Multiboot {
        path: name.clone(),
        source,
    })?;
    if info.format == KernelFormat::Elf64X86_64 {
        info.notes = notes::scan(&head, &mut |offset, len| {
            let mut buf = vec![0u8; len];
            file.seek(SeekFrom::Start(offset)).ok()?;
            file.read_exact(&mut buf).ok()?;
            Some(buf)
        });
    }
    Ok(info)
}

/// Why a kernel cannot boot as a guest kind (or as any).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestKindError {
    #[error(
        "an ELF file (class {class}, machine {machine}) that is neither ELF64 x86-64 nor multiboot"
    )]
    OtherElf { class: u8, machine: u16 },
    #[error("not a kernel Pacer can boot: not ELF64 x86-64, no multiboot header, not a bzImage")]
    Unknown,
    #[error("guest \"bench\": this ELF64 is a Linux vmlinux (it has \"Linux\" ELF notes); use guest = \"linux\"")]
    BenchIsLinux,
    #[error("guest \"bench\" needs an ELF64 x86-64 kernel")]
    BenchNotElf64,
    #[error("guest \"multiboot\": no multiboot header in the first 8 KiB")]
    NoMultibootHeader,
    #[error(
        "guest \"multiboot\": an ELF64 image needs a.out-kludge addresses in its multiboot header"
    )]
    MultibootElf64WithoutAout,
    #[error("guest \"linux\": an ELF64 file without \"Linux\" ELF notes is not a vmlinux")]
    LinuxWithoutNotes,
    #[error("guest \"linux\" needs a bzImage or an ELF64 vmlinux")]
    LinuxNotAKernel,
}

impl KernelInfo {
    /// The guest kind this kernel boots as when the config names none.
    pub fn default_guest(&self) -> Result<GuestKind, GuestKindError> {
        match (self.format, self.multiboot) {
            (KernelFormat::Elf64X86_64, _) if self.notes.linux => Ok(GuestKind::Linux),
            (KernelFormat::Elf64X86_64, _) => Ok(GuestKind::Bench),
            (KernelFormat::BzImage, _) => Ok(GuestKind::Linux),
            (_, Some(_)) => Ok(GuestKind::Multiboot),
            (KernelFormat::OtherElf { class, machine }, None) => {
                Err(GuestKindError::OtherElf { class, machine })
            }
            (KernelFormat::Raw, None) => Err(GuestKindError::Unknown),
        }
    }

    /// Can this kernel boot as `guest`? (Err: why not.)
    pub fn check_guest(&self, guest: GuestKind) -> Result<(), GuestKindError> {
        match guest {
            GuestKind::Bench if self.format == KernelFormat::Elf64X86_64 && self.notes.linux => {
                Err(GuestKindError::BenchIsLinux)
            }
            GuestKind::Bench if self.format == KernelFormat::Elf64X86_64 => Ok(()),
            GuestKind::Bench => Err(GuestKindError::BenchNotElf64),
            GuestKind::Multiboot => match self.multiboot {
                None => Err(GuestKindError::NoMultibootHeader),
                Some(h) if h.aout.is_none() && self.format == KernelFormat::Elf64X86_64 => {
                    Err(GuestKindError::MultibootElf64WithoutAout)
                }
                Some(_) => Ok(()),
            },
            GuestKind::Linux => match self.format {
                KernelFormat::BzImage => Ok(()),
                KernelFormat::Elf64X86_64 if self.notes.linux => Ok(()),
                KernelFormat::Elf64X86_64 => Err(GuestKindError::LinuxWithoutNotes),
                _ => Err(GuestKindError::LinuxNotAKernel),
            },
        }
    }
}

/// The state vCPU 0 starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// 64-bit long mode at `entry` (the bench guest's protocol).
    LongMode { entry: u64 },
    /// 32-bit protected mode at `entry`, EAX the multiboot magic, EBX
    /// `info_addr`.
    Multiboot { entry: u32, info_addr: u32 },
}

/// What [`load`] did.
#[derive(Debug, Clone)]
pub struct Booted {
    pub entry: EntryState,
    /// The command line the guest was given.
    pub cmdline: String,
}

/// Write a GDT at [`layout::GDT_ADDR`] and a null IDT after it.
pub(crate) fn write_gdt(mem: &GuestMemoryMmap, gdt: &[u64]) -> Result<(), BootError> {
    for (i, e) in gdt.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(layout::GDT_ADDR + 8 * i as u64))
            .map_err(|source| BootError::Write {
                what: "GDT",
                source,
            })?;
    }
    mem.write_obj(0u64, GuestAddress(layout::IDT_ADDR))
        .map_err(|source| BootError::Write {
            what: "IDT",
            source,
        })?;
    Ok(())
}

/// What a VM boots: its kernel and how (the guest kind), the initrd, the
/// multiboot modules and the command line. The layer above makes it from
/// its configuration (`config::VmConfig::spec`); boot reads no config.
#[derive(Debug, Clone, PartialEq)]
pub struct BootSpec {
    pub guest: GuestKind,
    pub kernel: PathBuf,
    /// Bench and Linux guests (a Linux guest's initramfs).
    pub initrd: Option<PathBuf>,
    /// Bench guest: the config's command line and workload arguments
    /// ([`load`] appends `tsc_khz=` and `vcpus=`). Multiboot: the kernel's
    /// command line. Linux: what follows `linux::PLATFORM_CMDLINE`.
    pub cmdline: String,
    /// Multiboot modules, in order.
    pub modules: Vec<Module>,
}

/// Load `spec`'s kernel (and initrd or modules) into `mem` for its guest
/// kind, for a VM of `vcpus` vCPUs. `tsc_khz` goes on the bench guest's
/// command line.
pub fn load(
    mem: &GuestMemoryMmap,
    spec: &BootSpec,
    vcpus: u32,
    tsc_khz: u32,
) -> Result<Booted, BootError> {
    match spec.guest {
        GuestKind::Bench => {
            let loaded = elf::load_kernel(mem, &spec.kernel, spec.initrd.as_deref())?;
            let cmdline = elf::build_cmdline(&spec.cmdline, tsc_khz, vcpus)?;
            elf::write_boot_structures(mem, &cmdline, &loaded)?;
            Ok(Booted {
                entry: EntryState::LongMode {
                    entry: loaded.entry,
                },
                cmdline: cmdline
                    .as_cstring()
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            })
        }
        GuestKind::Multiboot => {
            let l = multiboot::load(mem, &spec.kernel, &spec.cmdline, &spec.modules).map_err(
                |source| BootError::Multiboot {
                    path: spec.kernel.display().to_string(),
                    source,
                },
            )?;
            write_gdt(mem, &regs::protected_mode_gdt())?;
            acpi::write_tables(mem)?;
            Ok(Booted {
                entry: EntryState::Multiboot {
                    entry: l.entry,
                    info_addr: l.info_addr,
                },
                cmdline: l.cmdline,
            })
        }
        GuestKind::Linux => {
            let format = inspect(&spec.kernel)?.format;
            let l = linux::load(
                mem,
                &spec.kernel,
                format,
                spec.initrd.as_deref(),
                &spec.cmdline,
                vcpus,
            )?;
            Ok(Booted {
                entry: EntryState::LongMode { entry: l.entry },
                cmdline: l.cmdline,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::multiboot::tests::{elf32, header};
    use super::*;

    /// What a Linux guest counts its CPUs by agrees: CPUID's initial APIC
    /// id (leaf 1 EBX[31:24]) and x2APIC id (leaf 0xB EDX) of each vCPU,
    /// the logical-processor count, the MADT's local APIC entries and the
    /// MP table's processor entries.
    #[test]
    fn cpuid_madt_and_mp_table_name_the_same_cpus() {
        for n in [1u32, 2, 3, 8, 64] {
            let base = crate::cpuid::tests::base();
            let mut from_cpuid = Vec::new();
            for v in 0..n {
                let c = crate::cpuid::for_vcpu(&base, v, n).unwrap();
                let leaf = |f: u32, i: u32| {
                    *c.as_slice()
                        .iter()
                        .find(|e| e.function == f && e.index == i)
                        .unwrap()
                };
                let (l1, lb, core) = (leaf(1, 0), leaf(0xb, 0), leaf(0xb, 1));
                assert_eq!(l1.ebx >> 24, lb.edx, "leaf 1 and 0xB agree");
                assert_eq!((l1.ebx >> 16) & 0xff, n, "logical processors");
                assert_eq!(core.ebx, n, "processors at the core level");
                from_cpuid.push(lb.edx);
            }
            let madt = madt::build(*b"PACER ", 1, n);
            let (_, _, entries) = madt::tests::parse(&madt);
            let from_madt: Vec<u32> = entries
                .iter()
                .filter(|(t, _)| *t == 0)
                .map(|(_, b)| u32::from(b[3]))
                .collect();
            let mp = mptable::build(layout::MPTABLE_START, n).unwrap();
            let from_mp: Vec<u32> = mptable::tests::parse(&mp, layout::MPTABLE_START)
                .cpus
                .iter()
                .map(|&(id, _)| u32::from(id))
                .collect();
            assert_eq!(from_madt, from_cpuid, "{n} vCPUs: MADT");
            assert_eq!(from_mp, from_cpuid, "{n} vCPUs: MP table");
            let mut unique = from_cpuid.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), n as usize, "distinct APIC ids");
        }
    }

    #[test]
    fn formats_and_default_guests() {
        let mut elf64 = vec![0u8; 64];
        elf64[0..4].copy_from_slice(b"\x7fELF");
        elf64[4] = 2;
        elf64[5] = 1;
        elf64[18] = 62;
        let i = inspect_bytes(&elf64).unwrap();
        assert_eq!(i.format, KernelFormat::Elf64X86_64);
        assert_eq!(i.default_guest(), Ok(GuestKind::Bench));
        assert!(i.check_guest(GuestKind::Multiboot).is_err());

        let mb = elf32(0x40_0000, &header(0), 0);
        let i = inspect_bytes(&mb).unwrap();
        assert_eq!(
            i.format,
            KernelFormat::OtherElf {
                class: 1,
                machine: 3
            }
        );
        assert_eq!(i.default_guest(), Ok(GuestKind::Multiboot));
        assert!(i.check_guest(GuestKind::Multiboot).is_ok());
        let e = i.check_guest(GuestKind::Bench).unwrap_err().to_string();
        assert!(e.contains("ELF64"), "{e}");

        let mut bz = vec![0u8; 0x400];
        bz[0x1fe] = 0x55;
        bz[0x1ff] = 0xaa;
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        let i = inspect_bytes(&bz).unwrap();
        assert_eq!(i.format, KernelFormat::BzImage);
        assert_eq!(i.default_guest(), Ok(GuestKind::Linux));
        assert!(i.check_guest(GuestKind::Linux).is_ok());
        assert!(i.check_guest(GuestKind::Bench).is_err());

        // An ELF64 with "Linux" notes is a vmlinux.
        let vmlinux = crate::test_images::elf64_with_notes(&crate::test_images::note(
            b"Linux", 0x100, b"6.1\0",
        ));
        let i = inspect_bytes(&vmlinux).unwrap();
        assert_eq!(i.format, KernelFormat::Elf64X86_64);
        assert!(i.notes.linux);
        assert_eq!(i.default_guest(), Ok(GuestKind::Linux));
        let e = i.check_guest(GuestKind::Bench).unwrap_err().to_string();
        assert!(e.contains("guest = \"linux\""), "{e}");
        // ... and an ELF64 without them is not.
        let i = inspect_bytes(&elf64).unwrap();
        assert!(i
            .check_guest(GuestKind::Linux)
            .unwrap_err()
            .to_string()
            .contains("not a vmlinux"));

        let i = inspect_bytes(b"MZ not a kernel").unwrap();
        assert_eq!(i.format, KernelFormat::Raw);
        assert!(i.default_guest().is_err());
    }
}
