//! Power loss and recovery, as an ordered list of named steps (so logs and crash tests can
//! name "step k").
//!
//! What survives a power loss: the media (every programmed slot with its OOB), the durable
//! trim records, the erase counts and each line's mode. What is lost: the L2P table, the
//! open-line pointers, the valid counts, and queued NAND work. The write buffer is the
//! controller's (see `Controller::power_loss`). Recovery scans the OOB of every programmed
//! slot; for each logical unit the slot with the highest sequence number wins unless a trim
//! record is newer. Relocated copies keep their original sequence numbers, so a unit found
//! both in a GC victim and in its new place is the same write either way.
//!
//! MV-FTL (docs/waflash.md): a slot whose OOB holds a sector bitmap is a partial version.
//! After the newest slot of each unit is known, `rebuild_version_chains` takes the unit's
//! older slots, newest first, while the one taken last is partial, down to and including the
//! first whole one; slots older than a trim of the unit are dead. A merge keeps the newest
//! version's sequence number for the whole unit it writes, so at an equal sequence number a
//! whole slot is newer than a partial one.
//!
//! A compacted page (WAFLASH §3.3; its OOB names [`COMPACTED_LPN`]) holds one partial version
//! of each unit its table lists, with that unit's own sequence number: the scan and
//! `rebuild_version_chains` read its table and treat each section as a partial slot of its
//! unit, and the page is valid while any unit uses a section of it.

use super::ftl::{LineState, PageMap, RecoveryStep};
use crate::media::compacted::COMPACTED_LPN;
use crate::media::store::{LineStore, FLAG_TRANSIENT, NO_LPN};

/// The recovery steps, in order.
pub const STEPS: [&str; 6] = [
    "scan_oob",
    "apply_trim_records",
    "rebuild_version_chains",
    "rebuild_line_state",
    "rebuild_free_lists",
    "resume",
];

pub(super) fn power_loss(ftl: &mut PageMap) {
    ftl.l2p_clear_all();
    // Every open line of every stream is forgotten alike: recovery closes each line that
    // holds data whatever stream filled it, so the stream never matters to what comes back.
    ftl.open = [None; super::ftl::STREAMS];
    for l in &mut ftl.lines {
        l.valid = 0;
        l.transient = 0;
        if let Some(st) = l.store.as_mut() {
            st.clear_all_valid();
        }
    }
    ftl.free_dense.clear();
    ftl.free_slc.clear();
    ftl.in_gc = false;
    ftl.evicting = None;
    ftl.chains.clear();
    ftl.counters.mv_chained_units = 0;
    ftl.counters.mv_chain_versions = 0;
}

/// A slot of a unit whose chain recovery rebuilds: its sequence number, whether it holds a
/// whole unit, and its PPA.
type Version = (u64, bool, u32);

pub(super) fn recover(ftl: &mut PageMap, t_ns: u64) -> Vec<RecoveryStep> {
    let mut log = Vec::new();

    // Step 1: scan the OOB of every programmed slot; the newest copy of each unit wins (at an
    // equal sequence number a whole unit beats a partial version: the merge that wrote it).
    let mut best: rustc_hash::FxHashMap<u32, (u64, u32)> = Default::default();
    let mut partial_best: rustc_hash::FxHashSet<u32> = Default::default();
    let mut scanned = 0u64;
    let mut compacted_pages = 0u64;
    let mut max_seq = 0u64;
    for (li, line) in ftl.lines.iter().enumerate() {
        let Some(st) = line.store.as_ref() else { continue };
        for s in 0..line.wp {
            let lpn = st.lpn[s as usize];
            scanned += 1;
            if lpn == NO_LPN {
                continue;
            }
            max_seq = max_seq.max(st.seq[s as usize]);
            let ppa = ftl.layout.ppa(li as u32, s);
            if lpn == COMPACTED_LPN {
                compacted_pages += 1;
            }
            for (lpn, seq, partial) in versions_in(st, s) {
                max_seq = max_seq.max(seq);
                match best.entry(lpn) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert((seq, ppa));
                        if partial {
                            partial_best.insert(lpn);
                        }
                    }
                    std::collections::hash_map::Entry::Occupied(mut o) => {
                        let e = o.get_mut();
                        let whole_over_partial =
                            seq == e.0 && !partial && partial_best.contains(&lpn);
                        if seq > e.0 || whole_over_partial {
                            *e = (seq, ppa);
                            if partial {
                                partial_best.insert(lpn);
                            } else if !partial_best.is_empty() {
                                partial_best.remove(&lpn);
                            }
                        }
                    }
                }
            }
        }
        max_seq = max_seq.max(line.closed_seq);
    }
    // Compacted pages exist only in MV-FTL runs with compaction, so the Baseline's log reads
    // as it always did.
    let compacted_detail = if compacted_pages > 0 {
        format!(" ({compacted_pages} compacted pages)")
    } else {
        String::new()
    };
    log.push(RecoveryStep {
        name: STEPS[0],
        detail: format!("{scanned} slots scanned{compacted_detail}, {} units found", best.len()),
    });

    // Step 2: a trim newer than the newest copy unmaps the unit.
    let mut trimmed = 0u64;
    for (lpn, tseq) in ftl.trims.iter() {
        max_seq = max_seq.max(tseq);
        if best.get(&lpn).is_some_and(|&(seq, _)| seq < tseq) {
            best.remove(&lpn);
            trimmed += 1;
        }
    }
    // Units whose newest slot is a partial version, with the sequence number of their newest
    // trim (0: none): versions older than it are dead.
    let mut chained: rustc_hash::FxHashMap<u32, (u64, Vec<Version>)> = partial_best
        .iter()
        .filter(|lpn| best.contains_key(lpn))
        .map(|&lpn| (lpn, (ftl.trims.get(lpn).unwrap_or(0), Vec::new())))
        .collect();
    // Trims older than a unit's newest copy are superseded (the write path drops them too).
    ftl.trims.retain(|lpn, tseq| best.get(&lpn).is_none_or(|&(seq, _)| seq <= tseq));
    log.push(RecoveryStep {
        name: STEPS[1],
        detail: format!("{} trim records, {trimmed} units unmapped", ftl.trims.len()),
    });

    // Step 3: the version chains of units whose newest slot is partial (MV-FTL): every slot of
    // such a unit newer than its trim, newest first and whole before partial at an equal
    // sequence number; older slots join the chain while the one joined last is partial, down
    // to and including the first whole one. Copies with the sequence number of a slot already
    // taken are the same version (a relocated whole unit) and are skipped.
    let mut chain_slots = 0u64;
    if !chained.is_empty() {
        for (li, line) in ftl.lines.iter().enumerate() {
            let Some(st) = line.store.as_ref() else { continue };
            for s in 0..line.wp {
                for (lpn, seq, partial) in versions_in(st, s) {
                    if let Some((tseq, v)) = chained.get_mut(&lpn) {
                        if seq > *tseq {
                            v.push((seq, !partial, ftl.layout.ppa(li as u32, s)));
                        }
                    }
                }
            }
        }
    }
    let mut chains: Vec<(u32, Vec<u32>)> = Vec::with_capacity(chained.len());
    for (lpn, (_, mut v)) in chained {
        v.sort_unstable_by_key(|&(seq, whole, ppa)| (std::cmp::Reverse(seq), !whole, ppa));
        let (mut last_seq, mut last_whole, newest) = v[0];
        best.insert(lpn, (last_seq, newest));
        let mut chain = Vec::new();
        for &(seq, whole, ppa) in &v[1..] {
            if last_whole {
                break;
            }
            if seq == last_seq {
                continue;
            }
            chain.push(ppa);
            (last_seq, last_whole) = (seq, whole);
        }
        if !chain.is_empty() {
            chain_slots += chain.len() as u64;
            chains.push((lpn, chain));
        }
    }
    log.push(RecoveryStep {
        name: STEPS[2],
        detail: format!("{} units with versions, {chain_slots} older versions", chains.len()),
    });

    // Step 4: rebuild the table, valid and transient counts; every line that holds data is
    // closed (a line open at the crash is not written further).
    let mut entries: Vec<(u32, u32)> = best.into_iter().map(|(l, (_, p))| (l, p)).collect();
    entries.sort_unstable();
    for &(lpn, ppa) in &entries {
        ftl.l2p_set(lpn, ppa);
        mark_valid(ftl, ppa);
    }
    chains.sort_unstable_by_key(|c| c.0);
    for (lpn, chain) in chains {
        for &ppa in &chain {
            mark_valid(ftl, ppa);
        }
        ftl.counters.mv_chained_units += 1;
        ftl.counters.mv_chain_versions += chain.len() as u64 + 1;
        ftl.chains.insert(lpn, chain);
    }
    let mut closed = 0;
    for line in ftl.lines.iter_mut() {
        if line.store.is_some() {
            if line.state != LineState::Closed {
                line.state = LineState::Closed;
                line.closed_seq = max_seq + 1;
            }
            closed += 1;
        } else {
            line.state = LineState::Free;
        }
    }
    log.push(RecoveryStep {
        name: STEPS[3],
        detail: format!("{} units mapped, {closed} lines hold data", entries.len()),
    });

    // Step 5: free lists, least-erased first (a simple dynamic wear levelling at start-up).
    let mut free: Vec<u32> = (0..ftl.lines.len() as u32)
        .filter(|&l| ftl.lines[l as usize].state == LineState::Free)
        .collect();
    free.sort_by_key(|&l| (ftl.lines[l as usize].erase_count, l));
    for l in free {
        if ftl.lines[l as usize].slc {
            ftl.free_slc.push_back(l);
        } else {
            ftl.free_dense.push_back(l);
        }
    }
    log.push(RecoveryStep {
        name: STEPS[4],
        detail: format!("{} dense and {} SLC lines free", ftl.free_dense.len(), ftl.free_slc.len()),
    });

    // Step 6: continue sequence numbers after everything seen; restart the timelines.
    ftl.seq = max_seq + 2;
    ftl.timer.reset_timelines(t_ns);
    log.push(RecoveryStep { name: STEPS[5], detail: format!("next sequence number {}", ftl.seq) });
    log
}

/// Start-up from a NAND image file (`media::image`): loads every line's slots of its current
/// generation, its erase count and closing sequence number, and the trim records, as the
/// media would hold them after a power cut; then runs the power-loss recovery above on them,
/// and from then on writes the media through to the file. The first step, `load_image`, is
/// logged before the recovery steps.
/// The largest sequence number an image may hold: recovery counts on from the largest it
/// finds, and 2^63 leaves more room than a device could ever use.
const MAX_IMAGE_SEQ: u64 = 1 << 63;

pub(super) fn load_image(
    ftl: &mut PageMap,
    path: &std::path::Path,
) -> Result<Vec<RecoveryStep>, String> {
    use crate::media::image::NandImage;
    use crate::media::store::{IuImage, LineStore};

    let (img, loaded) = NandImage::open(path, &ftl.layout, &ftl.shape)?;
    let per = ftl.layout.slots_per_page;
    let mut gens = vec![0u32; ftl.lines.len()];
    let (mut lines_with_data, mut slots) = (0u64, 0u64);
    // What the image says is checked before it is used (each of these was a panic the
    // fuzzers found, docs/fuzzing.md): units past the device's, sequence numbers that leave no
    // room to count on, and a line generation that cannot be advanced.
    let units = ftl.layout.logical_ius;
    let corrupt = |what: String| format!("ssd image {}: {what}", path.display());
    let check_seq = |seq: u64, at: &str| {
        if seq > MAX_IMAGE_SEQ {
            return Err(corrupt(format!("{at} has sequence number {seq}, past {MAX_IMAGE_SEQ}")));
        }
        Ok(())
    };
    for (l, e) in loaded.lines.iter().enumerate() {
        if e.generation == u32::MAX {
            return Err(corrupt(format!("line {l} has generation {}, the largest", e.generation)));
        }
        check_seq(e.closed_seq, &format!("line {l}"))?;
        gens[l] = e.generation;
        let line = &mut ftl.lines[l];
        line.erase_count = e.erase_count;
        if e.generation == 0 {
            continue;
        }
        let records = img.read_line(l as u32, e.generation)?;
        if records.is_empty() {
            continue;
        }
        let capacity = ftl.layout.slots_per_line(line.slc);
        let mut st = LineStore::new(ftl.shape, capacity);
        let mut wp = 0;
        for (s, r) in records {
            if s >= capacity {
                return Err(format!(
                    "ssd image {}: line {l} has a record in slot {s}, past its {capacity} slots",
                    path.display()
                ));
            }
            if r.lpn != NO_LPN && r.lpn as u64 >= units {
                return Err(corrupt(format!(
                    "line {l} slot {s} holds unit {}, past the device's {units} units",
                    r.lpn
                )));
            }
            check_seq(r.seq, &format!("line {l} slot {s}"))?;
            st.put(s, r.lpn, r.seq, r.flags, &IuImage::from_bytes(r.image));
            wp = wp.max(s + 1);
            slots += 1;
        }
        // Programs fill whole pages (padding included), so the write pointer is past the
        // last page that holds a record.
        line.wp = wp.next_multiple_of(per).min(capacity);
        line.store = Some(Box::new(st));
        line.closed_seq = e.closed_seq;
        line.state = if e.closed_seq > 0 { LineState::Closed } else { LineState::Open };
        lines_with_data += 1;
    }
    let trim_records = loaded.trims.len();
    for &(lpn, seq) in &loaded.trims {
        if lpn as u64 >= units {
            return Err(corrupt(format!("a trim record names unit {lpn}, past {units} units")));
        }
        check_seq(seq, &format!("the trim record of unit {lpn}"))?;
    }
    for (lpn, seq) in loaded.trims {
        let newest = ftl.trims.get(lpn).unwrap_or(0).max(seq);
        ftl.trims.insert(lpn, newest);
    }
    let created = loaded.created;
    ftl.persist = Some(super::ftl::Persist { img, gens });
    let mut steps = vec![RecoveryStep {
        name: "load_image",
        detail: if created {
            format!("{}: created", path.display())
        } else {
            format!(
                "{}: {slots} programmed slots in {lines_with_data} lines, {trim_records} trim \
                 records",
                path.display()
            )
        },
    }];
    power_loss(ftl);
    steps.extend(recover(ftl, 0));
    // Trim records a later write superseded are gone from the table now: keep the rest.
    let live: Vec<(u32, u64)> = ftl.trims.iter().collect();
    if let Some(p) = ftl.persist.as_mut() {
        p.img.compact_trims(live.into_iter())?;
    }
    Ok(steps)
}

/// The versions of units the slot `s` of `st` holds, as (unit, sequence number, partial): one
/// for a plain slot (none for padding), one per section for a compacted page, read from its
/// table (WAFLASH §3.3's page header).
fn versions_in(st: &LineStore, s: u32) -> impl Iterator<Item = (u32, u64, bool)> + '_ {
    let lpn = st.lpn[s as usize];
    let table = if lpn == COMPACTED_LPN { st.compacted_of(s) } else { None };
    let plain = (lpn != NO_LPN && lpn != COMPACTED_LPN)
        .then(|| (lpn, st.seq[s as usize], st.partial_of(s).is_some()));
    let sections = table.into_iter().flat_map(|c| c.sections.iter().map(|x| (x.lpn, x.seq, true)));
    plain.into_iter().chain(sections)
}

/// Counts the slot at `ppa` as holding a current version again: its line's valid bitmap and
/// count, and the line's transient count when the slot was written transient. A compacted
/// page counts once, however many units use it (its table counts them).
fn mark_valid(ftl: &mut PageMap, ppa: u32) {
    let (l, s) = ftl.layout.split_ppa(ppa);
    let line = &mut ftl.lines[l as usize];
    let st = line.store.as_mut().expect("a slot found by the scan has a store");
    if st.acquire_compacted(s).is_some_and(|live| live > 1) {
        return;
    }
    line.valid += 1;
    st.set_valid(s);
    if st.flags[s as usize] & FLAG_TRANSIENT != 0 {
        line.transient += 1;
    }
}
