//! Pacer's VMM as a library: KVM VMs (memory, direct ELF boot, vCPUs,
//! devices), the configuration file, the run loop for many VMs, the
//! control API, results and their event-line format, seccomp. The `pacer`
//! tool (its commands, bench matrices, trace analysis, plots) is the
//! `pacer` crate, built on this one.
//!
//! Module map: [`config`] (TOML),
//! [`memory`] (layout + guest RAM), [`boot`] (kernel formats: direct ELF64
//! and multiboot; boot structures, ACPI for multiboot guests, per-vCPU
//! CPUID/MSRs/registers), [`cpuid`], [`msr`], [`irq`] (KVM interrupt lines),
//! [`vm`] (one VM), [`policy`] (which scheduler runs the vCPUs),
//! [`runner`] (many VMs), [`results`],
//! [`guest_metrics`] (per-vCPU workload metrics from the guest's records),
//! [`units`] (how quantities are printed), [`unixbench`] (the
//! UnixBench-style suite's console lines), [`api`] (the control API),
//! [`documents`] (the JSON documents' header and the VMM's own).
//!
//! The scheduled-vCPU engine, the vCPU runner and its gate, host CPU
//! numbers, the vCPU kick signal and trace recording are the `vcpu_engine`
//! crate, which this VMM uses as any embedder would; [`signals`] is the
//! run's own SIGINT/SIGTERM/SIGUSR1 handling.

pub mod api;
pub mod boot;
pub mod config;
pub mod cpuid;
pub mod documents;
pub mod guest_metrics;
pub mod guest_report;
pub mod input;
pub mod irq;
pub mod kernel_image;
pub mod memory;
pub mod msr;
pub mod policy;
pub mod results;
pub mod run_dir;
pub mod runner;
pub mod seccomp;
pub mod signals;
pub mod stop_registry;
pub mod suggest;
pub mod test_images;
pub mod text;
pub mod units;
pub mod unixbench;
pub mod vm;
pub mod whole_file;

pub use config::{Config, VmConfig};
pub use vm::{Vm, VmEvent, VmOptions, VmSpec};
