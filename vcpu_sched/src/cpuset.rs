//! A set of logical CPUs (hard affinity, core sets). Parses the Linux list
//! syntax ("0-3,8") used by sysfs and by Pacer's config files.

use crate::CpuId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A bitset of logical CPU ids, bounded by [`MAX_CPU_ID`]: a CPU id above
/// it is an error, never a giant allocation (at most 1 KiB of words).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// Why a CPU set could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    /// A CPU id above [`MAX_CPU_ID`].
    #[error("CPU {cpu} is above the limit {MAX_CPU_ID}")]
    TooLarge { cpu: u32 },
    /// Text that is not a CPU list (the reason names the item).
    #[error("bad CPU list {input:?}: {reason}")]
    BadList { input: String, reason: String },
}

/// Upper bound on CPU ids (KVM's own vCPU limit is 1024; hosts beyond 8192
/// CPUs are out of scope). Text, [`CpuSet::insert`] and topologies share it.
pub const MAX_CPU_ID: u32 = 8191;

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// All CPUs `0..n` (`n` above `MAX_CPU_ID + 1` is taken as that: no
    /// larger id exists).
    pub fn first_n(n: u32) -> Self {
        let n = n.min(MAX_CPU_ID + 1) as usize;
        let mut words = vec![u64::MAX; n / 64];
        if n % 64 != 0 {
            words.push((1u64 << (n % 64)) - 1);
        }
        CpuSet { words }
    }

    /// The set of one CPU.
    pub fn single(cpu: CpuId) -> Result<Self, CpuSetError> {
        let mut s = Self::new();
        s.insert(cpu)?;
        Ok(s)
    }

    /// Add a CPU; an id above [`MAX_CPU_ID`] is an error (the set is
    /// unchanged).
    pub fn insert(&mut self, cpu: CpuId) -> Result<(), CpuSetError> {
        if cpu.0 > MAX_CPU_ID {
            return Err(CpuSetError::TooLarge { cpu: cpu.0 });
        }
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
        Ok(())
    }

    pub fn remove(&mut self, cpu: CpuId) {
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
        self.trim();
    }

    /// Drop trailing empty words: one representation per set, so the
    /// derived equality and hash compare CPUs, not history.
    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    pub fn contains(&self, cpu: CpuId) -> bool {
        let (w, b) = (cpu.0 as usize / 64, cpu.0 % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The single CPU of a one-CPU set (a pinned entity).
    pub fn only(&self) -> Option<CpuId> {
        let mut it = self.iter();
        match (it.next(), it.next()) {
            (Some(c), None) => Some(c),
            _ => None,
        }
    }

    pub fn first(&self) -> Option<CpuId> {
        self.iter().next()
    }

    pub fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(CpuId(wi as u32 * 64 + b))
            })
        })
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        let mut set = CpuSet { words };
        set.trim();
        set
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// Raw 64-bit words (bit `i` of word `w` is CPU `64 * w + i`).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Parse the Linux CPU list syntax: "0-3,8,10-11". Whitespace around
    /// items is allowed; an empty string is an empty set.
    pub fn parse_list(input: &str) -> Result<CpuSet, CpuSetError> {
        parse_cpu_list(input)?.into_iter().map(CpuId).collect()
    }

    /// Format in the list syntax accepted by [`CpuSet::parse_list`].
    pub fn to_list(&self) -> String {
        format_cpu_list(self.iter().map(|c| c.0))
    }
}

/// Parse the Linux CPU list syntax ("0-3,8,10-11") into ascending numbers
/// without duplicates. Shared by [`CpuSet`] and by callers that keep CPU
/// numbers of another kind (a VMM's host CPU numbers).
pub fn parse_cpu_list(input: &str) -> Result<Vec<u32>, CpuSetError> {
    let err = |reason: String| CpuSetError::BadList {
        input: input.to_string(),
        reason,
    };
    let parse = |s: &str| -> Result<u32, CpuSetError> {
        let v: u32 = s
            .trim()
            .parse()
            .map_err(|_| err(format!("{s:?} is not a CPU number")))?;
        if v > MAX_CPU_ID {
            return Err(err(CpuSetError::TooLarge { cpu: v }.to_string()));
        }
        Ok(v)
    };
    let mut ids = Vec::new();
    for item in input
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (parse(lo)?, parse(hi)?);
                if lo > hi {
                    return Err(err(format!("range {item:?} runs backwards")));
                }
                ids.extend(lo..=hi);
            }
            None => ids.push(parse(item)?),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Format ascending CPU numbers in the list syntax of [`parse_cpu_list`].
pub fn format_cpu_list(ids: impl IntoIterator<Item = u32>) -> String {
    let mut out = Vec::new();
    let mut iter = ids.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek().is_some_and(|&n| n == end + 1) {
            end = iter.next().unwrap_or(end);
        }
        if start == end {
            out.push(format!("{start}"));
        } else {
            out.push(format!("{start}-{end}"));
        }
    }
    out.join(",")
}

/// `collect::<Result<CpuSet, _>>()`: the first id above [`MAX_CPU_ID`]
/// is the error.
impl FromIterator<CpuId> for Result<CpuSet, CpuSetError> {
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c)?;
        }
        Ok(s)
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_list())
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CpuSet::parse_list(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        let s = CpuSet::parse_list("0-3, 8,10-11").unwrap();
        let ids: Vec<u32> = s.iter().map(|c| c.0).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_list(), "0-3,8,10-11");
    }

    #[test]
    fn rejects_garbage_and_backwards_ranges() {
        assert!(CpuSet::parse_list("0-x").is_err());
        assert!(CpuSet::parse_list("5-2").is_err());
        assert!(CpuSet::parse_list("99999").is_err());
    }

    #[test]
    fn huge_cpu_ids_are_errors_not_allocations() {
        let mut s = CpuSet::new();
        let huge = CpuId(u32::MAX);
        assert_eq!(s.insert(huge), Err(CpuSetError::TooLarge { cpu: u32::MAX }));
        assert!(s.is_empty() && s.words().is_empty(), "nothing allocated");
        assert_eq!(s.insert(CpuId(MAX_CPU_ID)), Ok(()));
        assert_eq!(s.words().len(), (MAX_CPU_ID as usize + 1) / 64);
        assert!(CpuSet::single(CpuId(MAX_CPU_ID + 1)).is_err());
        let collected: Result<CpuSet, _> = [CpuId(1), huge].into_iter().collect();
        assert_eq!(collected, Err(CpuSetError::TooLarge { cpu: u32::MAX }));
        // The same words from a list as from an id.
        assert_eq!(
            CpuSet::parse_list("9000").unwrap_err().to_string(),
            format!(
                "bad CPU list \"9000\": {}",
                CpuSetError::TooLarge { cpu: 9000 }
            )
        );
        assert_eq!(CpuSet::first_n(u32::MAX).len(), MAX_CPU_ID as usize + 1);
        assert_eq!(CpuSet::first_n(65).to_list(), "0-64");
        assert_eq!(CpuSet::first_n(64).words().len(), 1);
        assert!(CpuSet::first_n(0).is_empty());
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse_list("0-3").unwrap();
        let b = CpuSet::parse_list("3-200").unwrap();
        assert_eq!(a.intersection(&b).only(), Some(CpuId(3)));
        assert!(a.intersects(&b));
        assert!(CpuSet::single(CpuId(2)).unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(b.len(), 198);
        // Equal sets compare equal however they were built.
        let mut c = CpuSet::parse_list("0-3,100").unwrap();
        c.remove(CpuId(100));
        assert_eq!(c, a);
        assert_eq!(
            b.intersection(&CpuSet::first_n(4)),
            CpuSet::single(CpuId(3)).unwrap()
        );
    }
}
