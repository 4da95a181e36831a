//! One thread's trace buffer: a bounded single-producer, single-consumer
//! ring of [`Record`]s. The thread that records is the only producer, the
//! drain thread the only consumer, so a write is a slot copy and one
//! release store (no read-modify-write, no lock), and a full ring drops
//! the new record and counts it instead of waiting: tracing never stalls
//! the engine.
//!
//! The slots are a mapping of their own (mmap), not a heap allocation:
//! a thread's ring is freed when the thread ends, under its seccomp
//! filter, and returning a large block to malloc may trim a thread heap,
//! which makes glibc read /proc/sys/vm/overcommit_memory the first time;
//! a munmap is allowed to every thread.
//!
//! A ring per *thread* rather than per host CPU: several threads share a
//! CPU (a preempted vCPU thread, the waker that dispatches onto it, the
//! timer thread), and a per-CPU buffer would need writers to claim slots
//! with atomics and a reader to wait for half-written ones. A dispatched
//! vCPU's thread is bound to its CPU, so each ring is in effect per CPU
//! while its vCPU runs.

use super::record::Record;
use crossbeam_utils::CachePadded;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// `len` records in an anonymous mapping of their own.
struct Slots {
    ptr: NonNull<Record>,
    len: usize,
}

impl Slots {
    /// A zeroed mapping for `len` records (None if the kernel refuses).
    fn map(len: usize) -> Option<Slots> {
        let bytes = len.checked_mul(std::mem::size_of::<Record>())?;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // All-zero bytes are a valid `Record` (plain integers), so the
        // mapping is `len` initialised records.
        Some(Slots {
            ptr: NonNull::new(p.cast())?,
            len,
        })
    }

    fn slot(&self, i: usize) -> *mut Record {
        debug_assert!(i < self.len);
        // SAFETY: i < len: inside the mapping.
        unsafe { self.ptr.as_ptr().add(i) }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of this size, unmapped once.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<Record>(),
            )
        };
    }
}

/// A bounded SPSC ring (see the module comment).
pub struct Ring {
    slots: Slots,
    /// Records written (the producer's counter; slot = head % capacity).
    head: CachePadded<AtomicU64>,
    /// Records taken by the consumer.
    tail: CachePadded<AtomicU64>,
    /// Records dropped because the ring was full (written by the producer).
    dropped: AtomicU64,
    /// Its number in its tracer.
    pub id: u32,
}

// SAFETY: slots in [tail, head) belong to the consumer, the others to the
// producer; head and tail are published with release stores and read with
// acquire loads, so a slot is never read and written at once. `push` must
// only be called by one thread at a time (the owning thread) and `drain`
// by one thread at a time (the drain thread); see their docs.
unsafe impl Sync for Ring {}
// SAFETY: as above; the ring owns plain data.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `capacity` records (at least one); None if the memory
    /// cannot be mapped.
    pub fn new(capacity: usize, id: u32) -> Option<Ring> {
        Some(Ring {
            slots: Slots::map(capacity.max(1))?,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            dropped: AtomicU64::new(0),
            id,
        })
    }

    /// Records it holds at most.
    pub fn capacity(&self) -> usize {
        self.slots.len
    }

    /// Append `r`, or count it dropped if the ring is full. Only the
    /// ring's own thread calls this.
    #[inline]
    pub fn push(&self, r: Record) {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        let cap = self.slots.len as u64;
        if head - tail >= cap {
            // Single producer: a plain load and store is an increment.
            let d = self.dropped.load(Ordering::Relaxed);
            self.dropped.store(d + 1, Ordering::Relaxed);
            return;
        }
        // SAFETY: head - tail < capacity, so this slot is outside
        // [tail, head): the consumer does not read it until the release
        // store below publishes it; only this thread writes slots.
        unsafe { self.slots.slot((head % cap) as usize).write(r) };
        self.head.store(head + 1, Ordering::Release);
    }

    /// Move every published record to `out`; returns how many. Only the
    /// drain thread calls this.
    pub fn drain(&self, out: &mut Vec<Record>) -> usize {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        let cap = self.slots.len as u64;
        for i in tail..head {
            // SAFETY: slots in [tail, head) were published by the
            // producer's release store of head and are not written again
            // until the release store of tail below hands them back.
            out.push(unsafe { self.slots.slot((i % cap) as usize).read() });
        }
        self.tail.store(head, Ordering::Release);
        (head - tail) as usize
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Nothing published is waiting to be drained.
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::Event;

    fn rec(i: u64) -> Record {
        Record::new(i, &Event::Idle { cpu: 0 })
    }

    #[test]
    fn a_full_ring_drops_and_counts_instead_of_waiting() {
        let ring = Ring::new(4, 0).unwrap();
        for i in 0..10 {
            ring.push(rec(i));
        }
        assert_eq!(ring.dropped(), 6);
        let mut out = Vec::new();
        assert_eq!(ring.drain(&mut out), 4);
        // The oldest are kept: what was dropped is what came after.
        assert_eq!(out.iter().map(|r| r.t_ns).collect::<Vec<_>>(), [0, 1, 2, 3]);
        // Drained, it takes records again, wrapping around.
        for i in 10..13 {
            ring.push(rec(i));
        }
        out.clear();
        assert_eq!(ring.drain(&mut out), 3);
        assert_eq!(out.iter().map(|r| r.t_ns).collect::<Vec<_>>(), [10, 11, 12]);
        assert_eq!(ring.dropped(), 6);
        assert!(ring.is_empty());
    }

    #[test]
    fn a_producer_and_the_drain_on_two_threads_lose_nothing_they_do_not_count() {
        let ring = std::sync::Arc::new(Ring::new(64, 0).unwrap());
        let n = 200_000u64;
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for i in 0..n {
                    ring.push(rec(i));
                }
            })
        };
        let mut got = Vec::new();
        while !producer.is_finished() {
            ring.drain(&mut got);
            std::thread::yield_now();
        }
        producer.join().unwrap();
        ring.drain(&mut got);
        assert_eq!(got.len() as u64 + ring.dropped(), n);
        // In order, each at most once.
        assert!(got.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
    }
}
