//! The fuzz targets: every input a guest or a user controls.

pub mod api;
pub mod config;
pub mod elf;
pub mod irqchip;
pub mod matrix;
pub mod pio;
pub mod record;
pub mod trace;

use crate::driver::Target;

/// Every target, in the order `pacer-fuzz` runs them.
pub fn all() -> Vec<Box<dyn Target>> {
    vec![
        Box::new(config::ConfigTarget::new()),
        Box::new(pio::PioTarget::new()),
        Box::new(irqchip::MmioTarget::new()),
        Box::new(record::RecordTarget::new()),
        Box::new(elf::ElfTarget::new()),
        Box::new(api::ApiTarget::new()),
        Box::new(trace::TraceTarget::new()),
        Box::new(matrix::MatrixTarget::new()),
    ]
}

/// The target called `name`.
pub fn by_name(name: &str) -> Option<Box<dyn Target>> {
    all().into_iter().find(|t| t.name() == name)
}

/// A scratch directory of this process for a target's files: in memory
/// (/dev/shm) where there is one, since a file rewritten per input on a
/// disk file system waits for its writeback.
pub fn scratch(tag: &str) -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    // One per target instance: an instance removes its own when dropped.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = base.join(format!("pacer-fuzz-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::create_dir_all(&d);
    d
}

/// What the config and matrix targets validate against: a scratch
/// directory holding a tiny guest image named `image`, and a 4-CPU host
/// with fixed resources. The directory is removed on drop.
pub struct GuestDir {
    pub dir: std::path::PathBuf,
    pub host: vmm::config::HostInfo,
}

impl GuestDir {
    pub fn new(tag: &str, image: &str) -> GuestDir {
        let dir = scratch(tag);
        let _ = std::fs::write(dir.join(image), tiny_elf(0x10_0000, &[0xf4], 0x1000));
        GuestDir {
            dir,
            host: vmm::config::HostInfo {
                online: vcpu_engine::host_cpus::HostCpuSet::parse_list("0-3").unwrap_or_default(),
                resources: vmm::config::host_resources::HostResources {
                    memory_mib: Some(4096),
                    max_vcpus_per_vm: Some(64),
                    max_open_files: Some(1024),
                    max_threads: Some(4096),
                },
            },
        }
    }
}

impl Drop for GuestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A minimal ELF64 x86-64 image: one PT_LOAD of `memsz` bytes at `paddr`
/// holding `code`, entry at `paddr`.
pub fn tiny_elf(paddr: u64, code: &[u8], memsz: u64) -> Vec<u8> {
    let mut e = vec![0u8; 64 + 56];
    e[0..4].copy_from_slice(b"\x7fELF");
    e[4] = 2; // 64-bit
    e[5] = 1; // little endian
    e[6] = 1;
    e[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    e[20..24].copy_from_slice(&1u32.to_le_bytes());
    e[24..32].copy_from_slice(&paddr.to_le_bytes()); // e_entry
    e[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    e[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    e[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    e[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let ph = &mut e[64..120];
    ph[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    ph[4..8].copy_from_slice(&7u32.to_le_bytes()); // RWX
    ph[8..16].copy_from_slice(&120u64.to_le_bytes()); // p_offset
    ph[16..24].copy_from_slice(&paddr.to_le_bytes()); // p_vaddr
    ph[24..32].copy_from_slice(&paddr.to_le_bytes()); // p_paddr
    ph[32..40].copy_from_slice(&(code.len() as u64).to_le_bytes()); // p_filesz
    ph[40..48].copy_from_slice(&memsz.to_le_bytes()); // p_memsz
    ph[48..56].copy_from_slice(&4096u64.to_le_bytes()); // p_align
    e.extend_from_slice(code);
    e
}
