//! Priority run queue: one FIFO list per priority level (121 levels, Haiku's
//! `RunQueue<ThreadData, THREAD_MAX_SET_PRIORITY>`) plus a bitmap of the
//! non-empty levels.
//!
//! Haiku keeps a max-heap of non-empty levels; a 121-bit bitmap (two words)
//! gives the same O(1) peek with an O(1) update (`leading_zeros`), so it is
//! used instead. Entries carry the sequence number the entity had when it
//! was queued, so a stale entry (the entity moved or its slot was reused)
//! is recognised by whoever pops it.

use crate::tunables::PRIORITY_LEVELS;
use crate::{CpuId, CpuSet, EntityId, VmId};
use std::collections::VecDeque;
use std::sync::Arc;

/// One queued entity: its id, the queue sequence number it was pushed with,
/// and the level (effective priority) it was pushed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueEntry {
    pub id: EntityId,
    pub seq: u64,
    pub level: u8,
    /// When it was queued: ties between a CPU's pinned queue and its core
    /// queue go to the older entry (FIFO across the two queues).
    pub since: u64,
    /// VM of the entity (SMT isolation decides without the entity lock).
    pub vm: VmId,
    /// Affinity of the entity (stealing decides without the entity lock;
    /// affinity never changes after `add_entity`); `None` when it holds
    /// every CPU (no reference count to touch, no set to read).
    pub affinity: Option<Arc<CpuSet>>,
    /// Its VM co-schedules (relaxed): a pick may take it over the head
    /// when a sibling runs (`co_start_pick`).
    pub cosched: bool,
}

/// FIFO lists per level and a bitmap of non-empty levels.
#[derive(Debug)]
pub(crate) struct RunQueue {
    levels: Vec<VecDeque<QueueEntry>>,
    nonempty: [u64; 2],
    len: usize,
}

impl Default for RunQueue {
    fn default() -> Self {
        RunQueue {
            levels: (0..PRIORITY_LEVELS).map(|_| VecDeque::new()).collect(),
            nonempty: [0; 2],
            len: 0,
        }
    }
}

/// Levels above the table are clamped so bad input cannot index out of bounds.
fn clamp_level(level: u8) -> usize {
    (level as usize).min(PRIORITY_LEVELS - 1)
}

impl QueueEntry {
    /// Whether the entity may run on `cpu`.
    pub fn allows(&self, cpu: CpuId) -> bool {
        self.affinity.as_ref().is_none_or(|a| a.contains(cpu))
    }
}

impl RunQueue {
    /// Number of queued entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn mark(&mut self, level: usize) {
        self.nonempty[level / 64] |= 1 << (level % 64);
    }

    #[inline]
    fn unmark_if_empty(&mut self, level: usize) {
        if self.levels[level].is_empty() {
            self.nonempty[level / 64] &= !(1 << (level % 64));
        }
    }

    /// Queue at the tail of its level (quantum ended, new arrival).
    #[inline]
    pub fn push_back(&mut self, entry: QueueEntry) {
        let level = clamp_level(entry.level);
        self.levels[level].push_back(QueueEntry {
            level: level as u8,
            ..entry
        });
        self.mark(level);
        self.len += 1;
    }

    /// Queue at the head of its level (preempted with quantum left).
    #[inline]
    pub fn push_front(&mut self, entry: QueueEntry) {
        let level = clamp_level(entry.level);
        self.levels[level].push_front(QueueEntry {
            level: level as u8,
            ..entry
        });
        self.mark(level);
        self.len += 1;
    }

    /// Highest non-empty level, O(1).
    #[inline]
    pub fn top_level(&self) -> Option<u8> {
        highest_bit(&self.nonempty).map(|l| l as u8)
    }

    /// Highest level holding an entry other than `id`'s: the best a
    /// directed yield from `id` must not jump (the yielder's own entry is
    /// its to give). At most one level more than `top_level`, since an
    /// entity is queued once.
    pub fn top_level_besides(&self, id: EntityId) -> Option<u8> {
        let mut bits = self.nonempty;
        while let Some(level) = highest_bit(&bits) {
            if self.levels[level].iter().any(|e| e.id != id) {
                return Some(level as u8);
            }
            bits[level / 64] &= !(1 << (level % 64));
        }
        None
    }

    /// The entry that `pop` would return, O(1).
    #[inline]
    pub fn head(&self) -> Option<&QueueEntry> {
        let level = self.top_level()?;
        self.levels[level as usize].front()
    }

    /// Take the oldest entry of the highest level.
    #[inline]
    pub fn pop(&mut self) -> Option<QueueEntry> {
        let level = self.top_level()? as usize;
        let entry = self.levels[level].pop_front()?;
        self.unmark_if_empty(level);
        self.len -= 1;
        Some(entry)
    }

    /// Remove a specific entry (priority change, removal, move). O(level length).
    pub fn remove(&mut self, id: EntityId, seq: u64, level: u8) -> bool {
        let level = clamp_level(level);
        let list = &mut self.levels[level];
        let Some(pos) = list.iter().position(|e| e.id == id && e.seq == seq) else {
            return false;
        };
        list.remove(pos);
        self.unmark_if_empty(level);
        self.len -= 1;
        true
    }

    /// Remove and return the first of the first `scan` entries in pick
    /// order (levels from the top, FIFO within one) that `accept` takes:
    /// `usize::MAX` looks at every entry (steal, SMT-isolation pick), a
    /// few a bounded look whatever the queue's length (sibling turns).
    pub fn take_first_within(
        &mut self,
        scan: usize,
        mut accept: impl FnMut(&QueueEntry) -> bool,
    ) -> Option<QueueEntry> {
        let mut left = scan;
        let mut bits = self.nonempty;
        while let Some(level) = highest_bit(&bits) {
            if left == 0 {
                return None;
            }
            bits[level / 64] &= !(1 << (level % 64));
            let looked = self.levels[level].len().min(left);
            if let Some(pos) = self.levels[level].iter().take(left).position(&mut accept) {
                let entry = self.levels[level].remove(pos)?;
                self.unmark_if_empty(level);
                self.len -= 1;
                return Some(entry);
            }
            left -= looked;
        }
        None
    }

    /// Remove and return the first of the first `scan` entries of
    /// `level` (FIFO) that `accept` takes: a look bounded to one level
    /// and a few entries, for picks on the hot path (co-start).
    pub fn take_first_at_level(
        &mut self,
        level: u8,
        scan: usize,
        accept: impl FnMut(&QueueEntry) -> bool,
    ) -> Option<QueueEntry> {
        let level = clamp_level(level);
        let pos = self.levels[level].iter().take(scan).position(accept)?;
        let entry = self.levels[level].remove(pos)?;
        self.unmark_if_empty(level);
        self.len -= 1;
        Some(entry)
    }

    /// The first `n` entries in pick order (leftover kicks).
    pub fn first_entries(&self, n: usize) -> Vec<QueueEntry> {
        self.entries().take(n).cloned().collect()
    }

    /// The earliest `since` among the heads of the non-empty levels (the
    /// longest wait, FIFO within a level; the fair-share boost's
    /// starvation guard). O(non-empty levels).
    pub fn oldest_head_since(&self) -> Option<u64> {
        let mut bits = self.nonempty;
        let mut oldest: Option<u64> = None;
        while let Some(level) = highest_bit(&bits) {
            bits[level / 64] &= !(1 << (level % 64));
            if let Some(h) = self.levels[level].front() {
                oldest = Some(oldest.map_or(h.since, |o| o.min(h.since)));
            }
        }
        oldest
    }

    /// Every queued entry in pick order: highest level first, FIFO within
    /// a level. Only the non-empty levels (the bitmap) are walked, not all
    /// 121: callers on the hot path read the first few entries of a queue
    /// (an idle CPU's steal, sibling gathering's counts).
    pub fn entries(&self) -> impl Iterator<Item = &QueueEntry> + '_ {
        NonEmptyLevels(self.nonempty).flat_map(|l| self.levels[l].iter())
    }
}

/// The set bits of a level bitmap, highest first.
struct NonEmptyLevels([u64; 2]);

impl Iterator for NonEmptyLevels {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let level = highest_bit(&self.0)?;
        self.0[level / 64] &= !(1 << (level % 64));
        Some(level)
    }
}

/// The highest set bit of a level bitmap (two words, low first).
fn highest_bit(bits: &[u64; 2]) -> Option<usize> {
    if bits[1] != 0 {
        Some(127 - bits[1].leading_zeros() as usize)
    } else if bits[0] != 0 {
        Some(63 - bits[0].leading_zeros() as usize)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u32, level: u8) -> QueueEntry {
        QueueEntry {
            id: EntityId::new(id, 0),
            seq: 0,
            level,
            since: 0,
            vm: VmId(0),
            affinity: None,
            cosched: false,
        }
    }

    #[test]
    fn the_top_level_besides_an_entity_leaves_out_its_entry_only() {
        let mut q = RunQueue::default();
        assert_eq!(q.top_level_besides(EntityId::new(1, 0)), None);
        q.push_back(e(1, 100));
        assert_eq!(q.top_level_besides(EntityId::new(1, 0)), None);
        q.push_back(e(2, 70));
        q.push_back(e(3, 10));
        assert_eq!(q.top_level(), Some(100));
        // Alone at its level (across the two bitmap words): the next one.
        assert_eq!(q.top_level_besides(EntityId::new(1, 0)), Some(70));
        assert_eq!(q.top_level_besides(EntityId::new(2, 0)), Some(100));
        // Sharing its level with another entry: that level.
        q.push_back(e(4, 100));
        assert_eq!(q.top_level_besides(EntityId::new(1, 0)), Some(100));
        assert_eq!(q.pop().map(|x| x.id.index()), Some(1));
        assert_eq!(q.top_level_besides(EntityId::new(4, 0)), Some(70));
    }

    #[test]
    fn a_take_within_a_scan_looks_at_the_first_entries_in_pick_order() {
        let mut q = RunQueue::default();
        q.push_back(e(1, 20));
        q.push_back(e(2, 20));
        for id in 3..=5 {
            q.push_back(e(id, 10));
        }
        // Pick order: 1, 2 (level 20), then 3, 4, 5 (level 10).
        assert_eq!(q.take_first_within(3, |x| x.id.index() == 4), None);
        assert_eq!(q.len(), 5);
        let got = q.take_first_within(4, |x| x.id.index() >= 3);
        assert_eq!(got.map(|x| x.id.index()), Some(3));
        let got = q.take_first_within(usize::MAX, |x| x.id.index() == 5);
        assert_eq!(got.map(|x| x.id.index()), Some(5));
        assert_eq!(q.take_first_within(0, |_| true), None);
        // Emptying the top level clears its bit.
        assert!(q.take_first_within(2, |x| x.level == 20).is_some());
        assert!(q.take_first_within(1, |x| x.level == 20).is_some());
        assert_eq!(q.top_level(), Some(10));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_bounded_take_looks_at_one_level_and_its_first_entries_only() {
        let mut q = RunQueue::default();
        for id in 1..=5 {
            q.push_back(e(id, 10));
        }
        q.push_back(e(9, 20));
        // Entry 4 is the fourth of its level: out of a scan of 3.
        assert_eq!(q.take_first_at_level(10, 3, |x| x.id.index() == 4), None);
        assert_eq!(q.len(), 6);
        let got = q.take_first_at_level(10, 4, |x| x.id.index() >= 3);
        assert_eq!(got.map(|x| x.id.index()), Some(3));
        assert_eq!(q.len(), 5);
        // Another level is never looked at.
        assert_eq!(q.take_first_at_level(10, 99, |x| x.id.index() == 9), None);
        // Emptying a level clears its bit: the head is the next level's.
        while q.take_first_at_level(20, 1, |_| true).is_some() {}
        assert_eq!(q.top_level(), Some(10));
        let order: Vec<u32> = std::iter::from_fn(|| q.pop())
            .map(|x| x.id.index())
            .collect();
        assert_eq!(order, vec![1, 2, 4, 5]);
    }

    #[test]
    fn run_queue_fifo_within_level_and_max_level_first() {
        let mut q = RunQueue::default();
        q.push_back(e(1, 10));
        q.push_back(e(2, 10));
        q.push_back(e(3, 120));
        q.push_back(e(4, 0));
        q.push_back(e(5, 64));
        q.push_front(e(6, 10));
        assert_eq!(q.len(), 6);
        assert_eq!(q.head().map(|x| x.id.index()), Some(3));
        let order: Vec<u32> = std::iter::from_fn(|| q.pop())
            .map(|x| x.id.index())
            .collect();
        assert_eq!(order, vec![3, 5, 6, 1, 2, 4]);
        assert_eq!(q.len(), 0);
        assert_eq!(q.top_level(), None);
    }

    #[test]
    fn run_queue_remove_and_take_first_keep_bitmap_exact() {
        let mut q = RunQueue::default();
        q.push_back(e(1, 63));
        q.push_back(e(2, 64));
        assert!(q.remove(EntityId::new(2, 0), 0, 64));
        assert!(!q.remove(EntityId::new(2, 0), 0, 64));
        assert_eq!(q.top_level(), Some(63));
        q.push_back(e(3, 5));
        let got = q.take_first_within(usize::MAX, |x| x.id.index() == 3);
        assert_eq!(got.map(|x| x.id.index()), Some(3));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop().map(|x| x.id.index()), Some(1));
        assert_eq!(q.top_level(), None);
    }

    #[test]
    fn first_entries_follow_pick_order_across_levels() {
        let mut q = RunQueue::default();
        for (id, level) in [(1, 10), (2, 10), (3, 120), (4, 0), (5, 64), (6, 63)] {
            q.push_back(e(id, level));
        }
        let all: Vec<u32> = q.entries().map(|x| x.id.index()).collect();
        assert_eq!(all, vec![3, 5, 6, 1, 2, 4]);
        for n in 0..8 {
            let first: Vec<u32> = q.first_entries(n).iter().map(|x| x.id.index()).collect();
            assert_eq!(first, all[..n.min(all.len())].to_vec(), "n = {n}");
        }
        assert_eq!(q.len(), 6, "peeking leaves the queue as it was");
    }
}
