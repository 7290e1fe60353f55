//! The FTL's durable trim records: for each mapping unit, the sequence number of its newest
//! trim that no programmed write has superseded yet.
//!
//! Recovery needs them (a trim newer than a unit's newest copy on flash unmaps it, so a crash
//! cannot bring trimmed data back), and every host program asks whether it supersedes one.
//! That question is asked once per programmed unit, so the table is dense and indexed by the
//! unit like the L2P, in chunks allocated on the first trim they hold: a run of consecutive
//! units shares cache lines. A hash map of the same records cost about 15% of a ScalaAFA trace
//! replay's wall time in cache misses, because ScalaAFA trims every backup copy it converts
//! and rewrites the same units soon after (docs/benchmarks.md, "reproduce scalaafa").

/// Units per chunk: the L2P's, so a chunk of records covers the units of one L2P chunk.
const CHUNK_UNITS: usize = super::ftl::L2P_CHUNK;

/// Trim records, unit -> sequence number (0 stands for "no record": write sequence numbers
/// start at 1, and a trim with sequence number 0 would supersede nothing).
#[derive(Default)]
pub struct TrimTable {
    chunks: Vec<Option<Box<[u64]>>>,
    records: usize,
}

impl TrimTable {
    /// A table for `units` mapping units.
    pub fn new(units: u64) -> Self {
        let n = (units as usize).div_ceil(CHUNK_UNITS);
        TrimTable { chunks: (0..n).map(|_| None).collect(), records: 0 }
    }

    /// How many units have a record.
    pub fn len(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The sequence number of `lpn`'s record, if it has one.
    pub fn get(&self, lpn: u32) -> Option<u64> {
        let c = self.chunks.get(lpn as usize / CHUNK_UNITS)?.as_ref()?;
        let s = c[lpn as usize % CHUNK_UNITS];
        (s != 0).then_some(s)
    }

    /// Records a trim of `lpn` at `seq`, replacing its older record. A record of sequence
    /// number 0 is not kept (it supersedes nothing).
    pub fn insert(&mut self, lpn: u32, seq: u64) {
        let i = lpn as usize / CHUNK_UNITS;
        if i >= self.chunks.len() {
            // Units past the table's size (the FTL checks ranges before it trims; a table
            // built with `default()` has no chunks) grow it rather than losing the record.
            self.chunks.resize_with(i + 1, || None);
        }
        let c = self.chunks[i].get_or_insert_with(|| vec![0u64; CHUNK_UNITS].into_boxed_slice());
        let slot = &mut c[lpn as usize % CHUNK_UNITS];
        match (*slot != 0, seq != 0) {
            (false, true) => self.records += 1,
            (true, false) => self.records -= 1,
            _ => {}
        }
        *slot = seq;
    }

    /// Forgets `lpn`'s record, if any.
    pub fn remove(&mut self, lpn: u32) {
        self.insert(lpn, 0);
    }

    /// Forgets `lpn`'s record if a write of sequence number `seq` supersedes it (the record is
    /// older). The write path's question, answered with one array access.
    pub fn supersede(&mut self, lpn: u32, seq: u64) {
        if self.records == 0 {
            return;
        }
        if self.get(lpn).is_some_and(|ts| ts < seq) {
            self.remove(lpn);
        }
    }

    /// Every record, in ascending unit order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.chunks.iter().enumerate().flat_map(|(i, c)| {
            c.iter().flat_map(move |c| {
                c.iter()
                    .enumerate()
                    .filter(|(_, &s)| s != 0)
                    .map(move |(j, &s)| ((i * CHUNK_UNITS + j) as u32, s))
            })
        })
    }

    /// Keeps the records `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(u32, u64) -> bool) {
        let mut records = 0;
        for (i, c) in self.chunks.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            for (j, s) in c.iter_mut().enumerate() {
                if *s != 0 {
                    if keep((i * CHUNK_UNITS + j) as u32, *s) {
                        records += 1;
                    } else {
                        *s = 0;
                    }
                }
            }
        }
        self.records = records;
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the dense table answers like the map it replaced. Method: the same random
    //! operations on both, compared after each.
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn behaves_like_a_map_of_records() {
        let units = 3 * CHUNK_UNITS as u64 + 17;
        let mut t = TrimTable::new(units);
        let mut m: BTreeMap<u32, u64> = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // A small set of units, so operations hit existing records often, spread over
            // every chunk including the short last one.
            let lpn = ((x >> 8) % 64) as u32 * (units / 64) as u32 + (x % 3) as u32;
            let seq = step + 1;
            match x % 4 {
                0 | 1 => {
                    t.insert(lpn, seq);
                    m.insert(lpn, seq);
                }
                2 => {
                    t.supersede(lpn, seq / 2);
                    if m.get(&lpn).is_some_and(|&ts| ts < seq / 2) {
                        m.remove(&lpn);
                    }
                }
                _ => {
                    t.remove(lpn);
                    m.remove(&lpn);
                }
            }
            assert_eq!(t.get(lpn), m.get(&lpn).copied(), "step {step}, unit {lpn}");
            assert_eq!(t.len(), m.len(), "step {step}");
        }
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            m.iter().map(|(&l, &s)| (l, s)).collect::<Vec<_>>()
        );
        t.retain(|lpn, _| lpn % 2 == 0);
        m.retain(|&lpn, _| lpn % 2 == 0);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            m.iter().map(|(&l, &s)| (l, s)).collect::<Vec<_>>()
        );
        assert_eq!(t.len(), m.len());
        for (lpn, _) in m {
            t.remove(lpn);
        }
        assert!(t.is_empty() && t.iter().next().is_none());
    }

    #[test]
    fn a_record_past_the_planned_size_is_kept() {
        let mut t = TrimTable::new(10);
        t.insert(5 * CHUNK_UNITS as u32, 9);
        assert_eq!(t.get(5 * CHUNK_UNITS as u32), Some(9));
        assert_eq!(t.len(), 1);
        t.insert(5, 0);
        assert_eq!(t.len(), 1, "a record of sequence number 0 is not kept");
    }
}
