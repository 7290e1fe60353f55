//! The conversion phase and AFA-level GC, which are one mechanism here: the *cleaner* packs
//! up to one stripe's worth (k chunks) of valid blocks into a free row as a new stripe.
//!
//! - Conversion (replicated data past the watermark, or the log past its row budget): the
//!   oldest valid replicated blocks, so log rows empty in the order they were written. It runs
//!   in background tasks, one per reactor by default (FusionRAID's kernel worker threads),
//!   several stripes at once, until the replicated data is back at the low watermark. Writers
//!   past the watermark wait for room meanwhile, so in the conversion phase user writes go on
//!   at the rate conversion frees space (§3.1, Fig. 3b).
//! - GC (spare rows down to the reserve a writer must leave): first the valid blocks of the
//!   rows with the fewest (stripes whose data was overwritten or trimmed, padded stripes, log
//!   rows), then the oldest replicated blocks. It runs in the writer that needs the rows, one
//!   at a time.
//!
//! Steps: choose the blocks and pin their rows; take a free row; read the blocks (degraded
//! where a member is gone); compute parity (charged as parity work, the gathering as copies);
//! write the k + m chunks with per-block metadata under the row's shared lock; remap the blocks
//! still current at their source (a block overwritten meanwhile stays behind, born invalid in
//! the new stripe). A stripe not filled is padded. Cleaners running at once claim the blocks
//! they chose, so no block is moved twice.
//!
//! Every block read is checked (`integrity`) and healed from redundancy. A block that no copy
//! holds intact is not moved: the stripe is packed without it, and it stays where it is
//! (reads of it keep answering `DevError::Corrupt`) until the user overwrites or trims it.
//! Moving it would give the corrupt contents a fresh checksum, or a parity that rebuilds them
//! as if they were right.
//!
//! Freed rows are reused only after a *barrier*: a flush of every member that started after
//! the row was freed (a user flush counts). Until then the row may hold the only durable copy
//! of something its replacement has not yet made durable. Then the row is trimmed on its
//! members and becomes free.

use std::sync::Arc;

use futures_util::future::join_all;

use flashrig_blockdev::{DevError, DevResult, WriteHints};
use flashrig_runtime::sleep_ns;

use super::format::{BlockMd, ParityKey, Tag};
use super::read::runs;
use super::state::{Loc, Mode, Need, Source};
use super::Inner;

impl Inner {
    /// Runs GC (one at a time) until a writer needing `rows_needed` new rows may go on.
    pub(super) async fn make_room(&self, rows_needed: u64) -> DevResult<()> {
        let _one = self.cleaner.lock(0).await;
        loop {
            if !self.tables.lock().gc_needed(rows_needed) {
                return Ok(());
            }
            if !self.clean_once(Mode::Gc).await? {
                let converting = {
                    let t = self.tables.lock();
                    if !t.gc_needed(rows_needed) {
                        return Ok(());
                    }
                    t.converters > 0
                };
                if converting {
                    // Background conversions hold rows and blocks GC could use; they free
                    // rows as they finish.
                    sleep_ns(10_000).await;
                    continue;
                }
                let t = self.tables.lock();
                return Err(DevError::NoSpace(format!(
                    "{}: the cleaner found nothing to move with {} spare rows \
                     ({} free, {} awaiting a flush)",
                    self.info.name,
                    t.spare_rows(),
                    t.free_rows(),
                    t.pending_rows()
                )));
            }
        }
    }

    /// Conversion tasks in the background: one per reactor unless configured (FusionRAID's
    /// kernel worker threads), each on its own reactor so its CPU work competes with that
    /// reactor's user I/O, as worker threads compete with I/O threads for cores.
    fn converter_count(&self) -> usize {
        let reactors =
            if flashrig_runtime::in_runtime() { flashrig_runtime::num_reactors() } else { 1 };
        self.convert_workers.unwrap_or(reactors).max(1)
    }

    /// Starts background conversion tasks while conversion is due and fewer than
    /// [`converter_count`](Self::converter_count) run.
    pub(super) fn start_converters(self: &Arc<Self>) {
        let want = self.converter_count();
        let reactors = flashrig_runtime::num_reactors();
        loop {
            let at = {
                let mut t = self.tables.lock();
                if t.converters >= want || t.convert_error.is_some() || !t.conversion_due() {
                    return;
                }
                t.converters += 1;
                t.converters_started += 1;
                (t.converters_started - 1) % reactors
            };
            let inner = self.clone();
            drop(flashrig_runtime::spawn_on(at, move || async move { inner.converter().await }));
        }
    }

    /// One background conversion task: converts stripe after stripe while conversion is due.
    async fn converter(self: Arc<Self>) {
        loop {
            if !self.tables.lock().conversion_due() {
                break;
            }
            match self.clean_once(Mode::Convert).await {
                Ok(true) => {
                    self.space_event.notify(usize::MAX);
                }
                Ok(false) => {
                    self.tables.lock().convert_stalls += 1;
                    break;
                }
                Err(e) => {
                    self.tables.lock().convert_error.get_or_insert(e);
                    break;
                }
            }
        }
        self.tables.lock().converters -= 1;
        self.space_event.notify(usize::MAX);
    }

    /// A writer that may not go on (the conversion phase): makes sure conversion runs and
    /// waits until a conversion made room. Returns `false` when conversion cannot move
    /// anything for now (what is left is in rows still being written), so the writer should
    /// go ahead anyway.
    pub(super) async fn wait_for_conversion(self: &Arc<Self>) -> DevResult<bool> {
        let listener = self.space_event.listen();
        let stalls = {
            let mut t = self.tables.lock();
            if let Some(e) = &t.convert_error {
                return Err(e.clone());
            }
            if t.admit() {
                return Ok(true);
            }
            t.convert_stalls
        };
        self.start_converters();
        listener.await;
        // A conversion task that found nothing to move since we looked: waiting again would
        // only start another that finds nothing.
        Ok(self.tables.lock().convert_stalls == stalls)
    }

    /// Writes one stripe; returns whether anything was moved.
    async fn clean_once(&self, mode: Mode) -> DevResult<bool> {
        let (row, gen, sources) = loop {
            let need = {
                let mut t = self.tables.lock();
                // Conversion leaves the reserve rows to GC: it frees rows only once its
                // stripe is written, and GC must always find one.
                if mode == Mode::Convert && t.spare_rows() <= t.geo.reserve_rows {
                    return Ok(false);
                }
                let sources = t.plan(mode);
                if sources.is_empty() {
                    return Ok(false);
                }
                match t.alloc_stripe() {
                    Ok(row) => break (row, t.gen_of(row), sources),
                    Err(n) => {
                        t.unplan(&sources);
                        n
                    }
                }
            };
            debug_assert_eq!(need, Need::Prepare);
            if !self.prepare_rows().await? {
                // Every row is in use (other cleaners' stripes hold the reserve): nothing to
                // do now. A writer waiting for room tries again while conversions run, and
                // reports a full array when none do (`make_room`).
                return Ok(false);
            }
        };
        if mode == Mode::Convert {
            self.c.conversions_started.inc();
        }
        match self.build_stripe(row, gen, &sources).await {
            Ok((stripe_seq, kept, stuck)) => {
                let moved = {
                    let mut t = self.tables.lock();
                    t.stick(&stuck);
                    t.commit_stripe(row, &kept, stripe_seq)
                };
                let bs = self.block_bytes() as u64;
                let d = self.geo.stripe_data_blocks();
                self.c.stripes_written.inc();
                match mode {
                    Mode::Convert => self.c.conversions.inc(),
                    Mode::Gc => self.c.gc_runs.inc(),
                }
                self.c.converted_bytes.add(moved.from_log * bs);
                self.c.gc_moved_bytes.add(moved.from_stripes * bs);
                self.c.padding_blocks.add(d - kept.len() as u64);
                let updates = moved.from_log + moved.from_stripes;
                self.c.map_updates.add(updates);
                self.costs.charge_map_updates(updates).await;
                Ok(true)
            }
            Err(e) => {
                self.tables.lock().abort_stripe(row, &sources);
                Err(e)
            }
        }
    }

    /// Reads the sources, computes parity and writes stripe row `row`; returns the stripe's
    /// sequence number, the sources it holds (in order) and the sources left where they are
    /// because no copy of them is intact.
    async fn build_stripe(
        &self,
        row: u64,
        gen: u16,
        sources: &[Source],
    ) -> DevResult<(u64, Vec<Source>, Vec<Source>)> {
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let (k, m, c) = (self.geo.k, self.geo.m, self.geo.chunk_blocks as usize);
        let chunk_bytes = c * bs;
        // Pooled buffers (given back at the end; dropped on an error): the reads fill the
        // sources' part of `data`, the padding is zeroed here, and encoding writes every byte
        // of the parity.
        let mut data = self.bufs.take(k * chunk_bytes);
        let lost = self.read_sources(sources, &mut data[..sources.len() * bs]).await?;
        let (mut kept, mut stuck) = (Vec::with_capacity(sources.len()), Vec::new());
        for (i, s) in sources.iter().enumerate() {
            if lost.binary_search(&i).is_ok() {
                stuck.push(*s);
            } else {
                // Packed without the stuck ones: later blocks move up.
                if kept.len() != i {
                    data.copy_within(i * bs..(i + 1) * bs, kept.len() * bs);
                }
                kept.push(*s);
            }
        }
        let sources = kept.as_slice();
        data[sources.len() * bs..].fill(0);
        self.costs.charge_copy((sources.len() * bs) as u64).await;
        let mut parity: Vec<Vec<u8>> = (0..m).map(|_| self.bufs.take(chunk_bytes)).collect();
        {
            let chunks: Vec<&[u8]> = data.chunks(chunk_bytes).collect();
            let mut rows: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            self.costs.charge_parity(data.len() as u64).await;
            self.codec.encode(&chunks, &mut rows).map_err(|e| DevError::Invalid(e.to_string()))?;
            self.c.parity_bytes.add((m * chunk_bytes) as u64);
        }
        let stripe_seq = self.tables.lock().alloc_seq();
        let lba = self.geo.member_lba(row);
        // Per-chunk metadata, code order (data 0..k, then parity).
        let mut mds: Vec<Vec<u8>> = Vec::with_capacity(k + m);
        for d in 0..k {
            let mut md = vec![0u8; c * mdb];
            for (b, mb) in md.chunks_exact_mut(mdb).enumerate() {
                let at = d * c + b;
                let block = &data[at * bs..(at + 1) * bs];
                let bm = match sources.get(at) {
                    Some(s) => match s.owner.trim() {
                        Some(rec) => BlockMd::item(Tag::StripeTrim, s.trim_start, d, rec, gen),
                        None => BlockMd::item(Tag::StripeData, s.owner.key, d, s.owner.seq, gen),
                    },
                    None => BlockMd::item(Tag::StripePad, 0, d, stripe_seq, gen),
                };
                bm.encode(mb, lba + b as u64, block);
            }
            mds.push(md);
        }
        for (r, p) in parity.iter().enumerate() {
            let key = ParityKey { row, k, m, r, version: self.format_version };
            let mut md = vec![0u8; c * mdb];
            for (b, (mb, block)) in md.chunks_exact_mut(mdb).zip(p.chunks_exact(bs)).enumerate() {
                BlockMd::parity(key, stripe_seq, gen).encode(mb, lba + b as u64, block);
            }
            mds.push(md);
        }
        let _row = self.rowlocks.shared(row).await;
        let missing = self.tables.lock().row(row).missing;
        let results = join_all((0..k + m).map(|x| {
            let i = self.geo.chunk_member(row, x);
            let bytes =
                if x < k { &data[x * chunk_bytes..(x + 1) * chunk_bytes] } else { &parity[x - k] };
            let md = &mds[x];
            async move {
                if !self.available(i, missing) {
                    return Ok(false);
                }
                self.write_member(i, lba, bytes, md, WriteHints::NONE).await
            }
        }))
        .await;
        let mut err = None;
        let gone = {
            let mut t = self.tables.lock();
            for (x, r) in results.into_iter().enumerate() {
                match r {
                    Ok(true) => {}
                    Ok(false) => t.mark_missing(row, self.geo.chunk_member(row, x)),
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            }
            t.row(row).missing.count_ones() as usize
        };
        self.bufs.give(parity.into_iter().chain([data]));
        if let Some(e) = err {
            return Err(e);
        }
        if gone > m {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: stripe row {row} reached only {} of {} members",
                    self.info.name,
                    k + m - gone,
                    k + m
                ),
            });
        }
        Ok((stripe_seq, kept, stuck))
    }

    /// Reads the sources' blocks, in order, into `buf`; returns the sources (indices,
    /// ascending) no copy of which is intact.
    async fn read_sources(&self, sources: &[Source], buf: &mut [u8]) -> DevResult<Vec<usize>> {
        let bs = self.block_bytes();
        let plan: Vec<(u64, Loc)> =
            sources.iter().enumerate().map(|(i, s)| (i as u64, s.loc)).collect();
        let runs = runs(&plan, self.geo.chunk_blocks);
        let mut rest = buf;
        let mut futs = Vec::with_capacity(runs.len());
        for run in &runs {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(run.count as usize * bs);
            rest = tail;
            futs.push(self.read_run(run.loc, run.count, head, run.first));
        }
        let mut lost = Vec::new();
        for (run, r) in runs.iter().zip(join_all(futs).await) {
            lost.extend(r?.into_iter().map(|b| (run.first + b as u64) as usize));
        }
        lost.sort_unstable();
        Ok(lost)
    }

    /// A flush of every member; rows freed before it started may be reused once it completes.
    pub(super) async fn barrier(&self) -> DevResult<()> {
        let e = {
            let mut t = self.tables.lock();
            t.epoch += 1;
            t.epoch
        };
        self.flush_members().await?;
        let mut t = self.tables.lock();
        t.barrier_passed = t.barrier_passed.max(e);
        Ok(())
    }

    /// Turns freed rows into free ones: a barrier if none is behind one yet, then trims them.
    /// Returns without having freed anything when the freed rows are pinned by reads in
    /// flight (after letting time pass); the caller tries again. Returns false when no row is
    /// free, freed or being trimmed at all: every row is in use, and only cleaning frees one.
    /// (That can happen to a writer whose `reserve` saw spare rows that another reactor's
    /// writers or cleaner took meanwhile; it used to fail the write with "device is full":
    /// crates/check/tests/twophase.rs, members failing mid-run, seed 800, under load.)
    pub(super) async fn prepare_rows(&self) -> DevResult<bool> {
        let (reusable, pending) = {
            let t = self.tables.lock();
            (t.reusable(), t.pending_rows())
        };
        if !reusable && pending > 0 {
            self.c.barriers.inc();
            self.barrier().await?;
        }
        let rows = self.tables.lock().take_reusable();
        if rows.is_empty() {
            let (free, spare) = {
                let t = self.tables.lock();
                (t.free_rows(), t.spare_rows())
            };
            if free == 0 && spare == 0 {
                return Ok(false);
            }
            sleep_ns(1_000).await;
            return Ok(true);
        }
        let c = self.geo.chunk_blocks;
        let trims = rows.iter().flat_map(|&r| (0..self.geo.members()).map(move |i| (r, i)));
        join_all(trims.map(|(r, i)| async move {
            if self.failed[i].load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            let (dev, inc) = self.member(i);
            self.costs.charge_member_ios(1).await;
            // A trim that fails leaves stale blocks of an older generation, which recovery
            // ignores; only a failed device is worth noting.
            if let Err(e) = dev.trim(self.geo.member_lba(r), c).await {
                self.note_error(i, inc, &e);
            }
        }))
        .await;
        self.c.row_trims.add(rows.len() as u64);
        self.tables.lock().finish_trim(&rows);
        Ok(true)
    }
}
