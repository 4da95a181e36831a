//! The structural checks the tests run after every event: every entity
//! is where its state says, exactly once.

use super::{Eevdf, State};
use crate::policy::baseline::{RunState, Slot};
use crate::{CpuId, EntityId, SchedClass};
use std::collections::HashMap;

impl Eevdf {
    /// The first broken invariant, if any:
    /// - a ready entity is on exactly one queue, of its class, on the CPU
    ///   it names, not delayed; a delayed one is a blocked fair entity on
    ///   its CPU's fair queue; a blocked one is on no queue otherwise;
    /// - a running entity runs on the CPU it names and on no queue; the
    ///   fair runner of a CPU is its `fair.curr`, and only it;
    /// - queues hold live entities only; a removed runner (zombie) still
    ///   runs on exactly one CPU.
    pub(super) fn check(&self) -> Result<(), String> {
        let st = self.state.lock();
        let mut seen: HashMap<EntityId, Vec<(usize, &str)>> = HashMap::new();
        for (c, cpu) in st.cpus.iter().enumerate() {
            let queues = [("rt", &cpu.rt), ("idle", &cpu.idle)];
            for (name, q) in queues {
                for id in q {
                    seen.entry(*id).or_default().push((c, name));
                }
            }
            for id in &cpu.fair.queued {
                seen.entry(*id).or_default().push((c, "fair"));
            }
        }
        for (slot_id, slot) in st.ents.table.slots() {
            let running_on: Vec<usize> = st
                .cpus
                .iter()
                .enumerate()
                .filter(|(_, x)| {
                    x.acct
                        .current()
                        .is_some_and(|r| r.index() == slot_id.index())
                })
                .map(|(c, _)| c)
                .collect();
            let queued = seen.remove(&slot_id).unwrap_or_default();
            let e = match slot {
                Slot::Live(e) => e,
                Slot::Zombie(_) if queued.is_empty() && running_on.len() == 1 => continue,
                Slot::Free if queued.is_empty() && running_on.is_empty() => continue,
                _ => {
                    return Err(format!(
                        "{slot_id}: removed but queued {queued:?}, running on {running_on:?}"
                    ))
                }
            };
            let class_queue = match e.acct.class {
                SchedClass::Realtime => "rt",
                SchedClass::Timeshare => "fair",
                SchedClass::Idle => "idle",
            };
            let fair_curr: Vec<usize> = st
                .cpus
                .iter()
                .enumerate()
                .filter(|(_, x)| x.fair.curr == Some(slot_id))
                .map(|(c, _)| c)
                .collect();
            let ok = match e.acct.state() {
                RunState::Ready => {
                    !e.fair.delayed
                        && running_on.is_empty()
                        && fair_curr.is_empty()
                        && matches!(queued[..], [(c, q)] if Some(c) == e.cpu && q == class_queue)
                }
                RunState::Blocked if e.fair.delayed => {
                    running_on.is_empty()
                        && fair_curr.is_empty()
                        && e.acct.class == SchedClass::Timeshare
                        && matches!(queued[..], [(c, "fair")] if Some(c) == e.cpu)
                }
                RunState::Blocked => {
                    queued.is_empty()
                        && running_on.is_empty()
                        && fair_curr.is_empty()
                        && e.cpu.is_none()
                }
                RunState::Running(CpuId(c)) => {
                    let fair = e.acct.class == SchedClass::Timeshare;
                    queued.is_empty()
                        && !e.fair.delayed
                        && running_on == [c as usize]
                        && e.cpu == Some(c as usize)
                        && (fair_curr == [c as usize] || (!fair && fair_curr.is_empty()))
                }
            };
            if !ok {
                return Err(format!(
                    "{slot_id} ({:?}, {:?}, cpu {:?}, delayed {}): queued {queued:?}, \
                     running on {running_on:?}, fair curr of {fair_curr:?}",
                    e.acct.state(),
                    e.acct.class,
                    e.cpu,
                    e.fair.delayed
                ));
            }
        }
        if let Some((id, q)) = seen.into_iter().next() {
            return Err(format!("{id} is not live but queued {q:?}"));
        }
        check_fair_currs(&st)
    }
}

/// A CPU's fair runner is what it runs.
fn check_fair_currs(st: &State) -> Result<(), String> {
    for (c, cpu) in st.cpus.iter().enumerate() {
        if let Some(f) = cpu.fair.curr {
            if cpu.acct.current() != Some(f) {
                return Err(format!(
                    "CPU {c}: fair curr {f} but runs {:?}",
                    cpu.acct.current()
                ));
            }
        }
    }
    Ok(())
}
