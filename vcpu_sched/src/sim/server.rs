//! A request server (the bench guest's `server`, schbench-like): requests
//! arrive open-loop at a VM's dispatcher vCPU, Poisson at a rate; the
//! dispatcher hands each to the worker with the shortest queue and wakes
//! it if it is blocked; a worker serves its queue one request per burst
//! and blocks when it is empty.
//!
//! A request's latency runs from its arrival to the end of its service
//! burst: the dispatcher's wake and queueing, the worker's wake and
//! queueing, and the service, as the guest measures it (no coordinated
//! omission: arrivals keep their times while the dispatcher is late).
//! A server vCPU's burst is one unit of work (an arrival handed on, a
//! request served), so its `burst` is the cost of that unit and its
//! `wake_cost` / `block_cost` the guest kernel's price of waking and
//! halting; its `sleep` is not used (it blocks exactly when it has no
//! work) and it starts blocked.
//!
//! This file holds a server's state and its choices; what its vCPUs do
//! on the simulator's events is `model.rs`'s, beside the other
//! behaviours (so the simulator's modules import in one direction).

use super::workload::{ServerRole, Workload};
use crate::Nanos;
use std::collections::VecDeque;

/// A VM's request server: its members, the arrivals the dispatcher has
/// not handed on yet, each worker's queue (arrival times), and what was
/// measured (requests that arrived in the window).
pub(super) struct Server {
    pub dispatcher: u32,
    pub workers: Vec<u32>,
    /// Mean inter-arrival time, us.
    pub mean_gap_us: f64,
    pub inbox: VecDeque<Nanos>,
    pub queues: Vec<VecDeque<Nanos>>,
    /// The worker last picked (ties go to the one after it).
    pub last: usize,
    /// Requests that arrived in the window.
    pub offered: u64,
    /// Latencies of the requests that arrived in the window and were served.
    pub latencies: Vec<Nanos>,
}

impl Server {
    /// The servers of `w`, one per VM with server groups (ascending VM
    /// order, as the model indexes them), members not filled in yet.
    pub(super) fn for_workload(w: &Workload) -> (Vec<u32>, Vec<Server>) {
        let mut vms: Vec<u32> = w
            .groups
            .iter()
            .filter(|g| g.server.is_some())
            .map(|g| g.vm)
            .collect();
        vms.sort_unstable();
        vms.dedup();
        let servers = vms
            .iter()
            .map(|&vm| {
                let rate = w
                    .groups
                    .iter()
                    .filter(|g| g.vm == vm)
                    .find_map(|g| match g.server {
                        Some(ServerRole::Dispatcher { rate_per_s }) => Some(rate_per_s),
                        _ => None,
                    })
                    .unwrap_or(1.0);
                Server {
                    // Set by `add_member` as the vCPUs are made.
                    dispatcher: u32::MAX,
                    workers: Vec::new(),
                    mean_gap_us: 1e6 / rate,
                    inbox: VecDeque::new(),
                    queues: Vec::new(),
                    last: 0,
                    offered: 0,
                    latencies: Vec::new(),
                }
            })
            .collect();
        (vms, servers)
    }

    /// Record vCPU `me` in its role.
    pub(super) fn add_member(&mut self, me: u32, role: ServerRole) {
        match role {
            ServerRole::Dispatcher { .. } => self.dispatcher = me,
            ServerRole::Worker => {
                self.workers.push(me);
                self.queues.push(VecDeque::new());
            }
        }
    }

    /// The worker with the shortest queue, ties to the first after the
    /// last one picked (the guest's `pick`).
    pub(super) fn pick(&mut self) -> usize {
        let n = self.queues.len();
        let mut best = (usize::MAX, 0);
        for k in 1..=n {
            let i = (self.last + k) % n;
            if self.queues[i].len() < best.0 {
                best = (self.queues[i].len(), i);
            }
        }
        self.last = best.1;
        best.1
    }

    /// Whether server member `e` has work waiting (an arrival to hand
    /// on, a request to serve).
    pub(super) fn has_work(&self, e: u32) -> bool {
        if e == self.dispatcher {
            return !self.inbox.is_empty();
        }
        self.workers
            .iter()
            .position(|&w| w == e)
            .is_some_and(|i| !self.queues[i].is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimError;

    fn server(queues: &[usize]) -> Server {
        Server {
            dispatcher: 0,
            workers: (1..=queues.len() as u32).collect(),
            mean_gap_us: 100.0,
            inbox: VecDeque::new(),
            queues: queues
                .iter()
                .map(|&n| (0..n as u64).collect::<VecDeque<_>>())
                .collect(),
            last: 0,
            offered: 0,
            latencies: Vec::new(),
        }
    }

    #[test]
    fn pick_takes_the_shortest_queue_and_rotates_ties() {
        let mut s = server(&[2, 0, 1]);
        assert_eq!(s.pick(), 1);
        let mut s = server(&[0, 0, 0]);
        // Ties go to the one after the last picked (0 at first).
        assert_eq!(s.pick(), 1);
        s.queues[1].push_back(5);
        assert_eq!(s.pick(), 2);
        s.queues[2].push_back(5);
        assert_eq!(s.pick(), 0);
    }

    fn parse(groups: &str) -> Result<Workload, SimError> {
        Workload::from_toml(&format!("topology = \"1x2x1\"\nduration_ms = 10\n{groups}"))
    }

    const WORKER: &str = "[[group]]\nname = \"w\"\ncount = 2\nserver = { role = \"worker\" }\nburst = { dist = \"fixed\", us = 100 }\n";

    #[test]
    fn a_server_needs_one_dispatcher_with_a_rate_and_a_worker() {
        let dispatcher = |rate: &str| {
            format!(
                "[[group]]\nname = \"d\"\ncount = 1\nserver = {{ role = \"dispatcher\", rate_per_s = {rate} }}\nburst = {{ dist = \"fixed\", us = 5 }}\n"
            )
        };
        let w = parse(&(dispatcher("1000") + WORKER)).unwrap();
        assert_eq!(
            w.groups[0].server,
            Some(ServerRole::Dispatcher { rate_per_s: 1000.0 })
        );
        assert_eq!(w.groups[1].server, Some(ServerRole::Worker));
        let err = |text: String| parse(&text).unwrap_err().to_string();
        assert!(err(dispatcher("1000")).contains("needs a worker"));
        assert!(err(dispatcher("0") + WORKER).contains("rate_per_s"));
        assert!(err(WORKER.to_string()).contains("exactly one server dispatcher"));
        let two = dispatcher("1000").replace("count = 1", "count = 2") + WORKER;
        assert!(err(two).contains("exactly one server dispatcher"));
        let sleeper = dispatcher("1000")
            + &WORKER.replace("count = 2", "count = 2\nsleep = { period_us = 100 }");
        assert!(err(sleeper).contains("blocks when it has no work"));
        // A typo in the table is refused.
        let typo = dispatcher("1000").replace("rate_per_s", "rate_per_sec") + WORKER;
        assert!(parse(&typo).is_err());
    }

    #[test]
    fn has_work_is_the_members_own_queue() {
        let mut s = server(&[0, 1]);
        assert!(!s.has_work(0), "an empty inbox");
        s.inbox.push_back(3);
        assert!(s.has_work(0));
        assert!(!s.has_work(1));
        assert!(s.has_work(2));
        assert!(!s.has_work(9), "not a member");
    }
}
