//! What a trace records: the engine's and the interrupt controller's
//! events ([`Event`]) and their fixed 32-byte form ([`Record`]), which is
//! what the hot path writes into its ring and what the file holds.
//!
//! One fixed size keeps a write to the ring a copy of four words, lets the
//! reader check a file by arithmetic (a frame of records is a multiple of
//! 32 bytes), and makes every record decodable on its own. The layout,
//! little-endian on disk:
//!
//! ```text
//! 0   u64  time, ns (CLOCK_MONOTONIC, the engine's clock)
//! 8   u8   kind (see `Kind`)
//! 9   u8   a small argument: stop reason, wake cause, flags
//! 10  u16  host CPU (OS numbering), 0xFFFF none
//! 12  u16  VM (the trace's VM id, in order of arrival), 0xFFFF none
//! 14  u16  vCPU index in its VM, 0xFFFF none
//! 16  u32  x   \
//! 20  u32  y    } per kind (vector, sender, priority, ...)
//! 24  u64  z   /  (quantum, deadline, count, ...)
//! ```

/// Size of one record in a ring and on disk.
pub const RECORD_BYTES: usize = 32;

/// "None" in a 16-bit field.
pub const NONE16: u16 = u16::MAX;

/// A vCPU as a trace names it: its VM (the order in which VMs joined the
/// run's engine, from 0) and its index in the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VcpuRef {
    /// The VM's trace id ([`crate::EngineVm::trace_id`], `VmMeta::id`).
    pub vm: u16,
    /// The vCPU's index in its VM.
    pub vcpu: u16,
}

/// Why a dispatched vCPU gave its CPU back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopWhy {
    /// Its time slice ended (possibly a slice a wake cut).
    Quantum,
    /// The scheduler kicked it off for another vCPU.
    Preempted,
    /// The guest wrote the yield port.
    Yielded,
    /// The guest halted with nothing to take.
    Halted,
    /// INIT: it waits for a start-up IPI.
    WaitSipi,
    /// Its VM paused.
    Paused,
    /// It never runs again (its VM stops, or a fatal exit).
    Exited,
}

impl StopWhy {
    const ALL: [StopWhy; 7] = [
        StopWhy::Quantum,
        StopWhy::Preempted,
        StopWhy::Yielded,
        StopWhy::Halted,
        StopWhy::WaitSipi,
        StopWhy::Paused,
        StopWhy::Exited,
    ];

    /// The reason in words, as summaries print it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopWhy::Quantum => "quantum end",
            StopWhy::Preempted => "preempted",
            StopWhy::Yielded => "yield",
            StopWhy::Halted => "halt",
            StopWhy::WaitSipi => "wait for SIPI",
            StopWhy::Paused => "paused",
            StopWhy::Exited => "exit",
        }
    }
}

/// Why a vCPU was told it has something to take (a wake's cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Its local APIC timer.
    Timer {
        /// When it was due, engine clock (0: not known, e.g. a TSC
        /// deadline written in the past).
        deadline_ns: u64,
    },
    /// An IPI from another vCPU of the same VM.
    Ipi {
        /// The sender's index.
        from: u16,
    },
    /// A device line.
    Line {
        /// The I/O APIC pin; `None`: redelivered by an EOI or a
        /// redirection-entry write.
        pin: Option<u8>,
    },
    /// The VM's boot vCPU starting.
    Start,
    /// Its VM resumed.
    Resume,
    /// KVM woke it inside KVM_RUN (its in-kernel local APIC, the
    /// `kvm-irqchip` dispatch): the timer, IPI or line that did is KVM's
    /// to know; the engine saw the vCPU running again.
    Kvm,
}

impl Cause {
    /// The cause's kind in words (what the summary groups by).
    pub fn kind(self) -> &'static str {
        match self {
            Cause::Timer { .. } => "timer",
            Cause::Ipi { .. } => "IPI",
            Cause::Line { .. } => "device line",
            Cause::Start => "start",
            Cause::Resume => "resume",
            Cause::Kvm => "woken in KVM",
        }
    }
}

/// What happened. Every event is about one host CPU and/or one vCPU.
///
/// Host CPUs (`cpu`, `from`, `to`) are OS numbers ([`crate::HostCpu`]),
/// as the run's topology (`RunMeta::topology`, `os_id`) lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `schedule` on `cpu` dispatched `vcpu`.
    Dispatch {
        /// The CPU.
        cpu: u16,
        /// The vCPU it runs now.
        vcpu: VcpuRef,
        /// The time slice it was given.
        quantum_ns: u64,
        /// Its effective priority (None: a policy without priorities).
        priority: Option<u8>,
        /// Dispatched onto an idle CPU from the waker's thread.
        by_waker: bool,
    },
    /// `schedule` on `cpu` found nothing to run: the CPU idles.
    Idle {
        /// The CPU.
        cpu: u16,
    },
    /// `vcpu` gave `cpu` back.
    Stop {
        /// The CPU.
        cpu: u16,
        /// The vCPU that ran there.
        vcpu: VcpuRef,
        /// Why it stopped.
        why: StopWhy,
        /// The CPU time of the thread that ran it
        /// (CLOCK_THREAD_CPUTIME_ID), so that a turn's CPU time is this
        /// less its `Unpark`'s, host preemption excluded.
        thread_cpu_ns: u64,
    },
    /// A wake of `woken` cut the slice of what `cpu` runs.
    Cut {
        /// The CPU whose slice was cut.
        cpu: u16,
        /// The vCPU whose wake cut it.
        woken: VcpuRef,
        /// The slice now ends this long after the event.
        end_in_ns: u64,
    },
    /// The interrupt controller told the engine `vcpu` has something to
    /// take ([`crate::Engine::notify`]).
    Notify {
        /// The vCPU.
        vcpu: VcpuRef,
        /// What it has to take.
        cause: Cause,
    },
    /// The scheduler's decision on a wake of `vcpu`.
    Wake {
        /// The vCPU woken.
        vcpu: VcpuRef,
        /// The CPU it goes to (None: it was runnable already).
        cpu: Option<u16>,
        /// That CPU is kicked (to preempt or to leave its idle wait).
        kick: bool,
        /// The slice of what that CPU runs was cut (a [`Event::Cut`]
        /// follows).
        cut: bool,
    },
    /// The engine kicked `cpu`.
    Kick {
        /// The CPU.
        cpu: u16,
        /// Its executor was signalled out of KVM_RUN; false: the CPU was
        /// idle and was given work.
        busy: bool,
    },
    /// `vcpu`'s KVM_RUN on `cpu` returned EINTR: a kick (or timer) was seen.
    ExitSeen {
        /// The CPU.
        cpu: u16,
        /// The vCPU that ran there.
        vcpu: VcpuRef,
    },
    /// `vector` was injected into `vcpu` on `cpu` (KVM_INTERRUPT).
    Inject {
        /// The CPU.
        cpu: u16,
        /// The vCPU.
        vcpu: VcpuRef,
        /// The interrupt vector.
        vector: u8,
    },
    /// `vcpu` wrote EOI for `vector`: its handler ran.
    Eoi {
        /// The vCPU.
        vcpu: VcpuRef,
        /// The vector its EOI ended.
        vector: u8,
    },
    /// `vcpu` was dispatched on another CPU than the one it ran on last.
    Migrate {
        /// The vCPU.
        vcpu: VcpuRef,
        /// The CPU it ran on last.
        from: u16,
        /// The CPU it runs on now.
        to: u16,
    },
    /// `vcpu`'s thread stops polling and sleeps until its vCPU is
    /// dispatched again.
    Park {
        /// The vCPU.
        vcpu: VcpuRef,
    },
    /// A thread takes `cpu` to run `vcpu` (its own thread woken from its
    /// sleep or found while polling, picked again, or a worker).
    Unpark {
        /// The CPU.
        cpu: u16,
        /// The vCPU.
        vcpu: VcpuRef,
        /// The thread's CPU time (see [`Event::Stop`]).
        thread_cpu_ns: u64,
    },
    /// Events were lost (a ring was full): written by the drain.
    Lost {
        /// How many.
        count: u64,
    },
    /// After `vcpu` blocked and left `cpu` idle, its thread (or the CPU's
    /// worker) polled for work before sleeping.
    HaltPoll {
        /// The CPU left idle.
        cpu: u16,
        /// The vCPU that blocked.
        vcpu: VcpuRef,
        /// How long it polled.
        polled_ns: u64,
        /// The work came within the poll (no sleep, no futex wake).
        woken: bool,
    },
}

/// The kind byte of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Dispatch = 1,
    Idle = 2,
    Stop = 3,
    Cut = 4,
    Notify = 5,
    Wake = 6,
    Kick = 7,
    ExitSeen = 8,
    Inject = 9,
    Eoi = 10,
    Migrate = 11,
    Park = 12,
    Unpark = 13,
    Lost = 14,
    HaltPoll = 15,
}

impl Kind {
    const ALL: [Kind; 15] = [
        Kind::Dispatch,
        Kind::Idle,
        Kind::Stop,
        Kind::Cut,
        Kind::Notify,
        Kind::Wake,
        Kind::Kick,
        Kind::ExitSeen,
        Kind::Inject,
        Kind::Eoi,
        Kind::Migrate,
        Kind::Park,
        Kind::Unpark,
        Kind::Lost,
        Kind::HaltPoll,
    ];

    fn from_u8(b: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| *k as u8 == b)
    }
}

/// Cause bytes.
const CAUSE_TIMER: u8 = 0;
const CAUSE_IPI: u8 = 1;
const CAUSE_LINE: u8 = 2;
const CAUSE_START: u8 = 3;
const CAUSE_RESUME: u8 = 4;
const CAUSE_KVM: u8 = 5;
/// Wake flags.
const WAKE_PLACED: u8 = 1;
const WAKE_KICK: u8 = 2;
const WAKE_CUT: u8 = 4;

/// One event with its time, in the fixed form rings and files hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Record {
    /// When, engine clock ([`crate::clock::now_ns`]).
    pub t_ns: u64,
    kind: u8,
    arg: u8,
    cpu: u16,
    vm: u16,
    vcpu: u16,
    x: u32,
    y: u32,
    z: u64,
}

/// Why a record does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The kind byte names no event (a newer writer, or damage).
    #[error("unknown record kind {0}")]
    Kind(u8),
    /// A field is out of its range for the kind.
    #[error("record kind {kind}: {what}")]
    Field {
        /// The kind byte.
        kind: u8,
        /// What is wrong.
        what: &'static str,
    },
}

impl Record {
    /// `event` at `t_ns`.
    #[inline]
    pub fn new(t_ns: u64, event: &Event) -> Record {
        let mut r = Record {
            t_ns,
            cpu: NONE16,
            vm: NONE16,
            vcpu: NONE16,
            ..Record::default()
        };
        let set_vcpu = |r: &mut Record, v: VcpuRef| (r.vm, r.vcpu) = (v.vm, v.vcpu);
        match *event {
            Event::Dispatch {
                cpu,
                vcpu,
                quantum_ns,
                priority,
                by_waker,
            } => {
                r.kind = Kind::Dispatch as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, vcpu);
                r.arg = u8::from(by_waker);
                r.x = priority.map_or(u32::MAX, u32::from);
                r.z = quantum_ns;
            }
            Event::Idle { cpu } => {
                r.kind = Kind::Idle as u8;
                r.cpu = cpu;
            }
            Event::Stop {
                cpu,
                vcpu,
                why,
                thread_cpu_ns,
            } => {
                r.kind = Kind::Stop as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, vcpu);
                r.arg = why as u8;
                r.z = thread_cpu_ns;
            }
            Event::Cut {
                cpu,
                woken,
                end_in_ns,
            } => {
                r.kind = Kind::Cut as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, woken);
                r.z = end_in_ns;
            }
            Event::Notify { vcpu, cause } => {
                r.kind = Kind::Notify as u8;
                set_vcpu(&mut r, vcpu);
                match cause {
                    Cause::Timer { deadline_ns } => {
                        r.arg = CAUSE_TIMER;
                        r.z = deadline_ns;
                    }
                    Cause::Ipi { from } => {
                        r.arg = CAUSE_IPI;
                        r.x = u32::from(from);
                    }
                    Cause::Line { pin } => {
                        r.arg = CAUSE_LINE;
                        r.x = pin.map_or(u32::MAX, u32::from);
                    }
                    Cause::Start => r.arg = CAUSE_START,
                    Cause::Resume => r.arg = CAUSE_RESUME,
                    Cause::Kvm => r.arg = CAUSE_KVM,
                }
            }
            Event::Wake {
                vcpu,
                cpu,
                kick,
                cut,
            } => {
                r.kind = Kind::Wake as u8;
                set_vcpu(&mut r, vcpu);
                r.cpu = cpu.unwrap_or(NONE16);
                r.arg = if cpu.is_some() { WAKE_PLACED } else { 0 }
                    | if kick { WAKE_KICK } else { 0 }
                    | if cut { WAKE_CUT } else { 0 };
            }
            Event::Kick { cpu, busy } => {
                r.kind = Kind::Kick as u8;
                r.cpu = cpu;
                r.arg = u8::from(busy);
            }
            Event::ExitSeen { cpu, vcpu } => {
                r.kind = Kind::ExitSeen as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, vcpu);
            }
            Event::Inject { cpu, vcpu, vector } => {
                r.kind = Kind::Inject as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, vcpu);
                r.x = u32::from(vector);
            }
            Event::Eoi { vcpu, vector } => {
                r.kind = Kind::Eoi as u8;
                set_vcpu(&mut r, vcpu);
                r.x = u32::from(vector);
            }
            Event::Migrate { vcpu, from, to } => {
                r.kind = Kind::Migrate as u8;
                r.cpu = to;
                set_vcpu(&mut r, vcpu);
                r.x = u32::from(from);
            }
            Event::Park { vcpu } => {
                r.kind = Kind::Park as u8;
                set_vcpu(&mut r, vcpu);
            }
            Event::Unpark {
                cpu,
                vcpu,
                thread_cpu_ns,
            } => {
                r.kind = Kind::Unpark as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, vcpu);
                r.z = thread_cpu_ns;
            }
            Event::Lost { count } => {
                r.kind = Kind::Lost as u8;
                r.z = count;
            }
            Event::HaltPoll {
                cpu,
                vcpu,
                polled_ns,
                woken,
            } => {
                r.kind = Kind::HaltPoll as u8;
                r.cpu = cpu;
                set_vcpu(&mut r, vcpu);
                r.arg = u8::from(woken);
                r.z = polled_ns;
            }
        }
        r
    }

    /// The event this record holds.
    pub fn event(&self) -> Result<Event, RecordError> {
        let kind = Kind::from_u8(self.kind).ok_or(RecordError::Kind(self.kind))?;
        let bad = |what| RecordError::Field {
            kind: self.kind,
            what,
        };
        let vcpu = || {
            (self.vm != NONE16 && self.vcpu != NONE16)
                .then_some(VcpuRef {
                    vm: self.vm,
                    vcpu: self.vcpu,
                })
                .ok_or(bad("no vCPU"))
        };
        let cpu = || {
            (self.cpu != NONE16)
                .then_some(self.cpu)
                .ok_or(bad("no CPU"))
        };
        let byte = |v: u32, what| u8::try_from(v).map_err(|_| bad(what));
        let flag = |what| match self.arg {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad(what)),
        };
        Ok(match kind {
            Kind::Dispatch => Event::Dispatch {
                cpu: cpu()?,
                vcpu: vcpu()?,
                quantum_ns: self.z,
                priority: match self.x {
                    u32::MAX => None,
                    p => Some(byte(p, "priority above 255")?),
                },
                by_waker: flag("dispatch flag not 0 or 1")?,
            },
            Kind::Idle => Event::Idle { cpu: cpu()? },
            Kind::Stop => Event::Stop {
                cpu: cpu()?,
                vcpu: vcpu()?,
                why: *StopWhy::ALL
                    .get(usize::from(self.arg))
                    .ok_or(bad("unknown stop reason"))?,
                thread_cpu_ns: self.z,
            },
            Kind::Cut => Event::Cut {
                cpu: cpu()?,
                woken: vcpu()?,
                end_in_ns: self.z,
            },
            Kind::Notify => Event::Notify {
                vcpu: vcpu()?,
                cause: match self.arg {
                    CAUSE_TIMER => Cause::Timer {
                        deadline_ns: self.z,
                    },
                    CAUSE_IPI => Cause::Ipi {
                        from: u16::try_from(self.x).map_err(|_| bad("IPI sender above 65535"))?,
                    },
                    CAUSE_LINE => Cause::Line {
                        pin: match self.x {
                            u32::MAX => None,
                            p => Some(byte(p, "pin above 255")?),
                        },
                    },
                    CAUSE_START => Cause::Start,
                    CAUSE_RESUME => Cause::Resume,
                    CAUSE_KVM => Cause::Kvm,
                    _ => return Err(bad("unknown cause")),
                },
            },
            Kind::Wake => {
                if self.arg & !(WAKE_PLACED | WAKE_KICK | WAKE_CUT) != 0 {
                    return Err(bad("unknown wake flags"));
                }
                let placed = self.arg & WAKE_PLACED != 0;
                Event::Wake {
                    vcpu: vcpu()?,
                    cpu: if placed { Some(cpu()?) } else { None },
                    kick: self.arg & WAKE_KICK != 0,
                    cut: self.arg & WAKE_CUT != 0,
                }
            }
            Kind::Kick => Event::Kick {
                cpu: cpu()?,
                busy: flag("kick flag not 0 or 1")?,
            },
            Kind::ExitSeen => Event::ExitSeen {
                cpu: cpu()?,
                vcpu: vcpu()?,
            },
            Kind::Inject => Event::Inject {
                cpu: cpu()?,
                vcpu: vcpu()?,
                vector: byte(self.x, "vector above 255")?,
            },
            Kind::Eoi => Event::Eoi {
                vcpu: vcpu()?,
                vector: byte(self.x, "vector above 255")?,
            },
            Kind::Migrate => Event::Migrate {
                vcpu: vcpu()?,
                from: u16::try_from(self.x).map_err(|_| bad("CPU above 65535"))?,
                to: cpu()?,
            },
            Kind::Park => Event::Park { vcpu: vcpu()? },
            Kind::Unpark => Event::Unpark {
                cpu: cpu()?,
                vcpu: vcpu()?,
                thread_cpu_ns: self.z,
            },
            Kind::Lost => Event::Lost { count: self.z },
            Kind::HaltPoll => Event::HaltPoll {
                cpu: cpu()?,
                vcpu: vcpu()?,
                polled_ns: self.z,
                woken: flag("halt poll flag not 0 or 1")?,
            },
        })
    }

    /// The on-disk bytes.
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&self.t_ns.to_le_bytes());
        b[8] = self.kind;
        b[9] = self.arg;
        b[10..12].copy_from_slice(&self.cpu.to_le_bytes());
        b[12..14].copy_from_slice(&self.vm.to_le_bytes());
        b[14..16].copy_from_slice(&self.vcpu.to_le_bytes());
        b[16..20].copy_from_slice(&self.x.to_le_bytes());
        b[20..24].copy_from_slice(&self.y.to_le_bytes());
        b[24..32].copy_from_slice(&self.z.to_le_bytes());
        b
    }

    /// A record from its on-disk bytes (any 32 bytes make a record; whether
    /// it holds an event is [`Record::event`]'s question).
    pub fn from_bytes(b: &[u8; RECORD_BYTES]) -> Record {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Record {
            t_ns: u64_at(0),
            kind: b[8],
            arg: b[9],
            cpu: u16_at(10),
            vm: u16_at(12),
            vcpu: u16_at(14),
            x: u32_at(16),
            y: u32_at(20),
            z: u64_at(24),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const V: VcpuRef = VcpuRef { vm: 1, vcpu: 3 };

    /// One event of every kind and variant.
    pub(crate) fn every_event() -> Vec<Event> {
        let mut all = vec![
            Event::Dispatch {
                cpu: 1,
                vcpu: V,
                quantum_ns: 2_500_000,
                priority: Some(8),
                by_waker: true,
            },
            Event::Dispatch {
                cpu: 0,
                vcpu: V,
                quantum_ns: 0,
                priority: None,
                by_waker: false,
            },
            Event::Idle { cpu: 7 },
            Event::Cut {
                cpu: 0,
                woken: V,
                end_in_ns: 100_000,
            },
            Event::Wake {
                vcpu: V,
                cpu: Some(1),
                kick: true,
                cut: false,
            },
            Event::Wake {
                vcpu: V,
                cpu: Some(0),
                kick: false,
                cut: true,
            },
            Event::Wake {
                vcpu: V,
                cpu: None,
                kick: false,
                cut: false,
            },
            Event::Kick { cpu: 1, busy: true },
            Event::Kick {
                cpu: 0,
                busy: false,
            },
            Event::ExitSeen { cpu: 1, vcpu: V },
            Event::Inject {
                cpu: 1,
                vcpu: V,
                vector: 0xfd,
            },
            Event::Eoi {
                vcpu: V,
                vector: 0xec,
            },
            Event::Migrate {
                vcpu: V,
                from: 0,
                to: 1,
            },
            Event::Park { vcpu: V },
            Event::Unpark {
                cpu: 1,
                vcpu: V,
                thread_cpu_ns: 7_000_000,
            },
            Event::Lost { count: 12345 },
            Event::HaltPoll {
                cpu: 1,
                vcpu: V,
                polled_ns: 40_000,
                woken: true,
            },
            Event::HaltPoll {
                cpu: 0,
                vcpu: V,
                polled_ns: 200_000,
                woken: false,
            },
        ];
        for why in StopWhy::ALL {
            all.push(Event::Stop {
                cpu: 0,
                vcpu: V,
                why,
                thread_cpu_ns: 9_000_000,
            });
        }
        for cause in [
            Cause::Timer {
                deadline_ns: 42_000_000,
            },
            Cause::Ipi { from: 0 },
            Cause::Line { pin: Some(4) },
            Cause::Line { pin: None },
            Cause::Start,
            Cause::Resume,
            Cause::Kvm,
        ] {
            all.push(Event::Notify { vcpu: V, cause });
        }
        all
    }

    #[test]
    fn every_event_survives_the_round_trip_through_bytes() {
        for (i, ev) in every_event().into_iter().enumerate() {
            let t = 1_000_000_007 * (i as u64 + 1);
            let r = Record::new(t, &ev);
            let back = Record::from_bytes(&r.to_bytes());
            assert_eq!(back, r);
            assert_eq!(back.t_ns, t);
            assert_eq!(back.event(), Ok(ev), "{ev:?}");
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        assert_eq!(std::mem::size_of::<Record>(), RECORD_BYTES);
        let r = Record::new(
            0x0102_0304_0506_0708,
            &Event::Inject {
                cpu: 0x0a0b,
                vcpu: VcpuRef { vm: 2, vcpu: 5 },
                vector: 0x30,
            },
        );
        let b = r.to_bytes();
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(b[8], 9, "kind Inject");
        assert_eq!(&b[10..12], &[0x0b, 0x0a]);
        assert_eq!(&b[12..16], &[2, 0, 5, 0]);
        assert_eq!(b[16], 0x30);
    }

    proptest! {
        /// Any 32 bytes decode to an event or an error, never a panic, and
        /// an event re-encodes to a record that decodes to it again.
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in prop::array::uniform32(any::<u8>())) {
            let r = Record::from_bytes(&bytes);
            if let Ok(ev) = r.event() {
                prop_assert_eq!(Record::new(r.t_ns, &ev).event(), Ok(ev));
            }
        }
    }
}
