//! The numbers a config is held to: defaults and accepted ranges (the
//! checks use them, and `config_reference` prints them).

/// Highest vCPU count per VM (APIC ids 0..=253; 0xff is broadcast).
pub const MAX_VCPUS: u32 = 254;
/// Default longest halt-polling window (KVM's default halt_poll_ns).
pub const DEFAULT_HALT_POLL_US: u64 = 200;
/// Largest halt-polling window accepted.
pub const MAX_HALT_POLL_US: i64 = 10_000;
/// `host.kvm_poll_us`'s range: how often the `kvm-irqchip` dispatch
/// samples KVM's halt statistics.
pub const KVM_POLL_US: (i64, i64) = (10, 10_000);
/// `host.kvm_poll_us`'s default (the engine's).
pub const DEFAULT_KVM_POLL_US: u64 = vcpu_engine::DEFAULT_KVM_POLL_NS / 1000;
/// `host.log_limit_kib`'s range: 64 KiB to 16 GiB per log per VM.
pub const LOG_LIMIT_KIB: (i64, i64) = (64, 16 << 20);
/// `host.result_records_per_s`'s range.
pub const RECORDS_PER_S: (i64, i64) = (1, 10_000_000);
/// Smallest guest RAM.
pub const MIN_MEMORY_MIB: u64 = 2;
/// Largest guest RAM accepted (1 TiB).
pub const MAX_MEMORY_MIB: u64 = 1 << 20;
