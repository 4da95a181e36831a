//! Deterministic discrete-event simulator of a machine running vCPUs under
//! any [`crate::VcpuScheduler`].
//!
//! The simulator plays the VMM: it owns the clock, the CPUs and the vCPUs'
//! behaviour (run bursts, sleeps, messages, a VM-wide spin lock, yields),
//! and calls `wake` / `schedule` exactly as a VMM's vCPU loop would,
//! honouring every kick a policy asks for (a kicking `WakeDecision` and
//! the CPUs in `Dispatch::kicks` after each `schedule`). The
//! same workload and seed give the same [`SimReport`], bit for bit (apart
//! from [`report::HostTiming`]).
//!
//! - [`workload`]: the input ([`Workload`], TOML or builder API), with
//!   [`change`]s made while it runs (the scheduler's runtime API);
//! - [`dist`]: burst / sleep distributions and the seeded random stream;
//! - `events`: the event queue (time, then sequence number);
//! - `model`: the vCPUs' behaviour and the simulator's own measurements;
//! - `server`: the state of a VM's request server (open-loop arrivals, a
//!   dispatcher, workers), the bench guest's `server`;
//! - `spin_watch`: the engine's spin watch, for relaxed VMs when the
//!   workload asks for it;
//! - `ranked`: Pacer's default dispatch, where the hypervisor wakes a
//!   halted vCPU at a real-time rank and the policy hears of it at the
//!   agent's looks, when the workload asks for it;
//! - `sibling_share`: under `ranked`, a co-scheduled VM wider than its
//!   CPUs running its queued siblings beside the sibling that owns a CPU,
//!   the host kernel's turns between them and the engine's paced sibling
//!   turns;
//! - [`engine`]: the loop that moves the model from event to event and
//!   plays the VMM towards the scheduler ([`Simulator`]); every answer goes
//!   through a [`crate::Monitor`], whose counts are the report's
//!   violations;
//! - [`report`]: the results ([`SimReport`], text table and JSON), built by
//!   `collect`;
//! - [`front`]: the command-line front end shared by `pacer sim` and the
//!   `sim` example;
//! - [`replay`]: recorded vCPUs (a VMM's scheduling trace) replayed by
//!   script instead of distributions, on any topology and policy.
//!
//! ```no_run
//! use vcpu_sched::sim::{self, Workload};
//! let w = Workload::from_file("vcpu_sched/scenarios/01_overload_balance.toml").unwrap();
//! let report = sim::run(&w).unwrap();
//! println!("{}", report.to_table());
//! assert_eq!(report.violations.total(), 0);
//! ```

pub mod change;
mod collect;
pub mod dist;
pub mod engine;
mod events;
pub mod front;
mod model;
mod ranked;
pub mod replay;
pub mod report;
mod server;
mod sibling_share;
mod spin_watch;
pub mod workload;

pub use change::ChangeSpec;
pub use dist::Dist;
pub use engine::{run, Simulator};
pub use report::{SimReport, Violations};
pub use workload::{
    GroupSpec, LockSpec, MessageSpec, ServerRole, ShootdownRole, SimDispatch, SimError, Sleep,
    Workload,
};
