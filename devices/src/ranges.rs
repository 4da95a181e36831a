//! Non-overlapping address ranges, each mapped to a value: the one lookup
//! the port-I/O bus and the MMIO bus share.

use std::collections::BTreeMap;

/// Why a range cannot be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Empty, or past the end of the address space.
    Bad,
    /// Overlaps the range that starts at this address.
    Overlap(u64),
}

/// `base -> (len, value)`, disjoint.
pub(crate) struct RangeMap<T> {
    map: BTreeMap<u64, (u64, T)>,
}

impl<T> Default for RangeMap<T> {
    fn default() -> Self {
        RangeMap {
            map: BTreeMap::new(),
        }
    }
}

impl<T> RangeMap<T> {
    /// Map `base..base+len` (which must end at or below `limit`) to `value`.
    pub fn insert(&mut self, base: u64, len: u64, limit: u64, value: T) -> Result<(), RangeError> {
        let end = match base.checked_add(len) {
            Some(end) if len > 0 && end <= limit => end,
            _ => return Err(RangeError::Bad),
        };
        // Ranges are disjoint: only the nearest one below `end` can overlap.
        if let Some((&b, (l, _))) = self.map.range(..end).next_back() {
            if base < b + l {
                return Err(RangeError::Overlap(b));
            }
        }
        self.map.insert(base, (len, value));
        Ok(())
    }

    /// The value whose range holds all of `addr..addr+size`, with `addr`'s
    /// offset in it.
    pub fn resolve(&self, addr: u64, size: usize) -> Option<(u64, &T)> {
        let (&base, (len, value)) = self.map.range(..=addr).next_back()?;
        let off = addr - base;
        (off.checked_add(size.max(1) as u64)? <= *len).then_some((off, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_and_resolve() {
        let mut m = RangeMap::default();
        m.insert(0x10, 0x10, 0x100, 'a').unwrap();
        m.insert(0x20, 0x10, 0x100, 'b').unwrap();
        assert_eq!(
            m.insert(0x1f, 2, 0x100, 'c'),
            Err(RangeError::Overlap(0x20)),
            "the nearest range below the end"
        );
        assert_eq!(
            m.insert(0x05, 0x20, 0x100, 'c'),
            Err(RangeError::Overlap(0x20))
        );
        assert_eq!(m.insert(0xf8, 0x10, 0x100, 'c'), Err(RangeError::Bad));
        assert_eq!(m.insert(0x40, 0, 0x100, 'c'), Err(RangeError::Bad));
        assert_eq!(m.insert(u64::MAX, 2, u64::MAX, 'c'), Err(RangeError::Bad));
        assert_eq!(m.resolve(0x12, 4), Some((2, &'a')));
        assert_eq!(m.resolve(0x1e, 4), None, "straddles two ranges");
        assert_eq!(m.resolve(0x2f, 1), Some((0xf, &'b')));
        assert_eq!(m.resolve(0x30, 1), None);
        assert_eq!(m.resolve(0x0f, 1), None);
        assert_eq!(m.resolve(u64::MAX, 8), None);
    }
}
