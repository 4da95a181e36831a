//! A VM's guest RAM: the mmap'd regions of `crate::memory`'s layout, each
//! registered with KVM as one memslot. The `Vm` keeps the returned memory
//! alive, and drops it after the VM fd, for as long as the memslots exist.

use super::VmError;
use crate::memory;
use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use std::sync::Arc;
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Allocate `memory_mib` MiB of guest RAM and register it with `vm_fd`.
pub(super) fn create_guest_ram(
    vm_fd: &VmFd,
    memory_mib: u64,
) -> Result<Arc<GuestMemoryMmap>, VmError> {
    let mem = Arc::new(memory::create_guest_memory(memory_mib)?);
    for (slot, region) in mem.iter().enumerate() {
        let r = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().raw_value(),
            memory_size: region.len(),
            userspace_addr: region.as_ptr() as u64,
        };
        // SAFETY: the region is a live mmap owned by `mem`, which the Vm
        // keeps alive (and drops after the VM fd) for as long as the
        // memslot exists; slots do not overlap.
        unsafe { vm_fd.set_user_memory_region(r) }.map_err(VmError::Memslot)?;
    }
    Ok(mem)
}
