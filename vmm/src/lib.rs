//! Pacer's VMM: KVM VMs (memory, direct ELF boot, vCPUs, devices), the
//! configuration file, the run loop for many VMs, and the `pacer` CLI.
//!
//! Module map: [`config`] (TOML), [`memory`] (layout + guest RAM), [`boot`]
//! (kernel formats: direct ELF64 and multiboot; boot structures, ACPI for
//! multiboot guests, per-vCPU CPUID/MSRs/registers), [`cpuid`], [`msr`],
//! [`irq`] (KVM interrupt lines), [`vcpu`] (thread, state machine, kick,
//! pause), [`vm`] (one VM), [`runner`] (many VMs), [`results`], [`cli`].

pub mod boot;
pub mod cli;
pub mod config;
pub mod cpuid;
pub mod irq;
pub mod memory;
pub mod msr;
pub mod results;
pub mod runner;
pub mod vcpu;
pub mod vm;

pub use config::{Config, VmConfig};
pub use vm::{Vm, VmEvent, VmOptions};
