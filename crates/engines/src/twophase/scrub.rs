//! Scrub (`vendor(VendorCommand::Scrub)`): walks every live row and checks every live block
//! with its redundancy, the way reads check the blocks they touch (`integrity`), so corruption
//! that no read has met yet is found and repaired while redundancy can still repair it.
//!
//! - A log row: for each replica set, the copies of its valid blocks are read from every
//!   member of the set (one read per member for the set's span) and each copy is checked; a
//!   bad copy is rewritten from a good one. Without checksums (16 metadata bytes) copies whose
//!   metadata matches may still differ in their data: that is a redundancy mismatch, and the
//!   data most copies hold (the first copy's on a tie, as md's raid1 "repair" does) is written
//!   to the others.
//! - A stripe row: all k + m chunks are read whole and every block (data, padding, parity) is
//!   checked; bad blocks are rebuilt from the others and rewritten. Then, at every offset whose
//!   data is intact, the parity is recomputed: parity that disagrees with the data it protects
//!   although it passed its own check is a redundancy mismatch and is rewritten.
//!
//! The scrub runs while I/O goes on: each row is pinned while it is checked (so it is not
//! reused), stripe rows still being written are skipped, only log blocks that are valid when
//! the row is looked at are checked (a write in flight has not made its blocks valid yet), and
//! rewrites take the row's shared lock, like writers (a rebuild of the row holds it exclusive).

use futures_util::future::join_all;

use flashrig_blockdev::{DevError, DevResult, ScrubReport};

use super::format::BlockMd;
use super::integrity::{push_fix, Fix, Tally};
use super::state::{Expect, Kind, Loc};
use super::Inner;

impl Inner {
    pub(super) async fn scrub(&self) -> DevResult<ScrubReport> {
        self.check_alive()?;
        let mut report = ScrubReport::default();
        for r in 0..self.geo.rows {
            let plan = {
                let mut t = self.tables.lock();
                let row = t.row(r);
                if !row.live() || row.building {
                    continue;
                }
                let kind = row.kind;
                // Log sets: what each valid block must hold; the other positions are not
                // checked (`Any`).
                let sets: Vec<Vec<Expect>> = if kind == Kind::Log {
                    let fills: Vec<u32> = row.sets.iter().map(|s| s.fill).collect();
                    fills
                        .iter()
                        .enumerate()
                        .map(|(s, &fill)| {
                            (0..fill)
                                .map(|off| {
                                    let loc = Loc::Log { row: r, set: s as u32, off };
                                    let o = t.row(r).sets[s].owners[off as usize];
                                    if t.is_valid(o, loc) {
                                        t.expect(loc)
                                    } else {
                                        Expect::Any
                                    }
                                })
                                .collect()
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                t.pin(r);
                (kind, sets)
            };
            let res = match plan {
                (Kind::Log, sets) => self.scrub_log_row(r, sets).await,
                _ => self.scrub_stripe_row(r).await,
            };
            self.tables.lock().unpin(r);
            report.add(&res?);
        }
        Ok(report)
    }

    async fn scrub_log_row(&self, r: u64, sets: Vec<Vec<Expect>>) -> DevResult<ScrubReport> {
        let mut report = ScrubReport::default();
        for (s, exp) in sets.into_iter().enumerate() {
            let Some(lo) = exp.iter().position(|e| *e != Expect::Any) else { continue };
            let hi = exp.len() - exp.iter().rev().position(|e| *e != Expect::Any).expect("one");
            report.add(&self.scrub_log_set(r, s, lo, hi, &exp).await?);
        }
        Ok(report)
    }

    /// Checks offsets `lo..hi` of replica set `s` of log row `r` on every copy.
    async fn scrub_log_set(
        &self,
        r: u64,
        s: usize,
        lo: usize,
        hi: usize,
        exp: &[Expect],
    ) -> DevResult<ScrubReport> {
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let copies = self.geo.copies();
        let n = hi - lo;
        let lba = self.geo.member_lba(r) + lo as u64;
        let view = {
            let t = self.tables.lock();
            self.view(&t, r)
        };
        let reads = (0..copies).map(|j| {
            let i = self.geo.set_member(r, s, j);
            let inc = view.incs[i];
            let available = self.available(i, view.missing);
            async move {
                if !available {
                    return Ok(None);
                }
                let (mut data, mut md) = (vec![0u8; n * bs], vec![0u8; n * mdb]);
                let ok = self.read_member(i, inc, lba, &mut data, Some(&mut md)).await?;
                if ok {
                    self.c.member_read_bytes.add(data.len() as u64);
                }
                Ok::<_, DevError>(ok.then_some((data, md)))
            }
        });
        let found: Vec<Option<(Vec<u8>, Vec<u8>)>> =
            join_all(reads).await.into_iter().collect::<DevResult<_>>()?;
        if found.iter().all(|f| f.is_none()) {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: no readable copy of replica set {s} of row {r} ({} failed members)",
                    self.info.name,
                    self.failed_members().len()
                ),
            });
        }
        let mut report = ScrubReport::default();
        let mut tally = Tally::default();
        let mut fixes: Vec<Fix> = Vec::new();
        for b in 0..n {
            let e = exp[lo + b];
            if e == Expect::Any {
                continue;
            }
            let at = lba + b as u64;
            let block = |j: usize| {
                found[j].as_ref().map(|(d, m)| (&d[b * bs..][..bs], &m[b * mdb..][..mdb]))
            };
            let mut good: Vec<usize> = Vec::new();
            let mut bad: Vec<usize> = Vec::new();
            for j in 0..copies {
                if let Some((d, m)) = block(j) {
                    tally.checked += 1;
                    if self.block_ok(e, r, j, at, d, m) {
                        good.push(j);
                    } else {
                        bad.push(j);
                    }
                }
            }
            tally.bad += bad.len() as u64;
            let Some(&first) = good.first() else {
                tally.unrepairable += 1;
                continue;
            };
            // The copy the others get: without checksums, the data most intact copies hold.
            let mut source = first;
            if !self.integrity() && good.len() > 1 {
                let votes = |j: usize| {
                    let d = block(j).expect("read").0;
                    good.iter().filter(|&&x| block(x).expect("read").0 == d).count()
                };
                let best = good.iter().copied().max_by_key(|&j| (votes(j), copies - j));
                source = best.expect("a good copy");
                let data = block(source).expect("read").0;
                for &j in &good {
                    if block(j).expect("read").0 != data {
                        report.redundancy_mismatches += 1;
                        bad.push(j);
                    }
                }
            }
            let (d, m) = block(source).expect("read");
            for &j in &bad {
                let i = self.geo.set_member(r, s, j);
                let mut md = m.to_vec();
                BlockMd::reindex(&mut md, j, at, d);
                fixes.push(Fix { member: i, inc: view.incs[i], lba: at, data: d.to_vec(), md });
            }
        }
        // Merge rewrites of consecutive blocks on one member into one write.
        fixes.sort_by_key(|f| (f.member, f.lba));
        let mut merged = Vec::with_capacity(fixes.len());
        for f in fixes {
            push_fix(&mut merged, f.member, f.inc, f.lba, &f.data, &f.md);
        }
        self.count(&tally);
        tally.healed = self.heal(r, merged, false).await;
        report.blocks_checked += tally.checked;
        report.checksum_errors += tally.bad;
        report.repaired += tally.healed;
        report.unrepairable += tally.unrepairable;
        Ok(report)
    }

    async fn scrub_stripe_row(&self, r: u64) -> DevResult<ScrubReport> {
        let (k, m, n) = (self.geo.k, self.geo.m, self.geo.members());
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let c = self.geo.chunk_blocks as usize;
        let all: Vec<usize> = (0..n).collect();
        let sr = self.read_stripe(r, 0, c as u64, &all, None, false).await?;
        let mut report = ScrubReport {
            blocks_checked: sr.tally.checked,
            checksum_errors: sr.tally.bad,
            redundancy_mismatches: 0,
            repaired: sr.tally.healed,
            unrepairable: sr.tally.unrepairable,
        };
        // Parity against the data it protects, where every data block is intact or rebuilt
        // and the parity block passed its own check (a rebuilt one fits by construction).
        let check: Vec<bool> = (0..c).map(|b| (0..k).all(|d| sr.usable[d][b])).collect();
        if !check.iter().any(|&x| x) {
            return Ok(report);
        }
        let zeros = vec![0u8; c * bs];
        let data: Vec<&[u8]> = (0..k).map(|d| sr.chunks[d].as_deref().unwrap_or(&zeros)).collect();
        let mut parity: Vec<Vec<u8>> = (0..m).map(|_| vec![0u8; c * bs]).collect();
        {
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            self.costs.charge_parity((k * c * bs) as u64).await;
            self.codec.encode(&data, &mut outs).map_err(|e| DevError::Invalid(e.to_string()))?;
        }
        let view = {
            let t = self.tables.lock();
            self.view(&t, r)
        };
        let exps: Vec<Vec<Expect>> = {
            let t = self.tables.lock();
            (k..n).map(|x| t.expect_chunk(r, x, 0, c as u64)).collect()
        };
        let base = self.geo.member_lba(r);
        let mut fixes = Vec::new();
        for x in k..n {
            let Some(stored) = sr.chunks[x].as_deref() else { continue };
            let i = self.geo.chunk_member(r, x);
            for b in 0..c {
                if !check[b] || !sr.intact[x][b] {
                    continue;
                }
                let want = &parity[x - k][b * bs..][..bs];
                if want != &stored[b * bs..][..bs] {
                    report.redundancy_mismatches += 1;
                    let mut md = vec![0u8; mdb];
                    let at = base + b as u64;
                    if self.encode_expected(exps[x - k][b], r, x, at, want, &mut md) {
                        push_fix(&mut fixes, i, view.incs[i], at, want, &md);
                    }
                }
            }
        }
        report.repaired += self.heal(r, fixes, false).await;
        Ok(report)
    }
}
