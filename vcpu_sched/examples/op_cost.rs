//! Steady-state cost of a quantum end with N entities, measured by a plain
//! loop (no criterion). A cross-check for `benches/sched_ops.rs`: the
//! criterion bench shows quantum_end at 65536 entities ~4x its 64-entity
//! cost on 8 CPUs, this loop ~1.4x on the same API; the gap is not yet
//! explained (the criterion harness between samples, or heap layout after
//! earlier setups, are suspects).
//!
//! Run: `cargo run --release -p vcpu_sched --example op_cost -- 1x4x2 65536 3000000`

use vcpu_sched::{build, CpuId, EntitySpec, SchedClass, SchedConfig, StopReason, Topology, VmId};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let spec = args.next().unwrap_or_else(|| "1x4x2".into());
    let entities: usize = args.next().map_or(Ok(65_536), |a| a.parse())?;
    let ops: u64 = args.next().map_or(Ok(3_000_000), |a| a.parse())?;
    let topo = Topology::from_spec(&spec)?;
    let ncpus = topo.num_cpus() as u32;
    let affinity = topo.all_cpus();
    let config = SchedConfig {
        max_entities: entities.max(1),
        ..SchedConfig::default()
    };
    let sched = build(topo, config)?;
    let mut now = 0;
    for _ in 0..entities {
        let spec = EntitySpec {
            vm: VmId(0),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: affinity.clone(),
        };
        let id = sched.add_entity(spec, now)?;
        now += 1_000;
        sched.wake(id, now)?;
    }
    for cpu in 0..ncpus {
        sched.schedule(CpuId(cpu), now, StopReason::Idle)?;
    }
    let mut cpu = 0;
    let mut quantum_ends = |count: u64, now: &mut u64| -> Result<(), vcpu_sched::SchedError> {
        for _ in 0..count {
            *now += 1_000;
            std::hint::black_box(sched.schedule(CpuId(cpu), *now, StopReason::QuantumEnd)?);
            cpu = (cpu + 1) % ncpus;
        }
        Ok(())
    };
    // Warm up: every queued entity runs once.
    quantum_ends(entities as u64 + 1_000, &mut now)?;
    let start = std::time::Instant::now();
    quantum_ends(ops, &mut now)?;
    let per_op = start.elapsed().as_nanos() as f64 / ops as f64;
    println!("{spec} {entities} entities: quantum_end {per_op:.0} ns/op over {ops} ops");
    Ok(())
}
