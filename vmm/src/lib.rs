//! Pacer's VMM: KVM VMs (memory, direct ELF boot, vCPUs, devices), the
//! configuration file, the run loop for many VMs, and the `pacer` CLI.
//!
//! Module map: [`bench`] (benchmark matrices), [`config`] (TOML),
//! [`memory`] (layout + guest RAM), [`boot`] (kernel formats: direct ELF64
//! and multiboot; boot structures, ACPI for multiboot guests, per-vCPU
//! CPUID/MSRs/registers), [`cpuid`], [`msr`], [`irq`] (KVM interrupt lines),
//! [`vcpu`] (the vCPU runner, its gate, host-mode thread), [`vm`] (one VM),
//! [`engine`] (Pacer's own vCPU scheduling), [`host_cpus`] (OS CPU
//! numbers), [`signals`], [`runner`] (many VMs), [`results`],
//! [`guest_metrics`] (per-vCPU workload metrics from the guest's records),
//! [`unixbench`] (the UnixBench-style suite's scoring and host reference),
//! [`cli`].

pub mod bench;
pub mod boot;
pub mod cli;
pub mod config;
pub mod cpuid;
pub mod engine;
pub mod guest_metrics;
pub mod host_cpus;
pub mod irq;
pub mod memory;
pub mod msr;
pub mod results;
pub mod runner;
pub mod signals;
pub mod sim_command;
pub mod unixbench;
pub mod vcpu;
pub mod vm;

pub use config::{Config, VmConfig};
pub use vm::{Vm, VmEvent, VmOptions};
