//! The zone state machine of a zoned namespace (NVMe ZNS, TP 4053 §2.1), shared by every
//! device that offers zones: the emulated SSD's zoned FTL and the `zoned` emulation layer over
//! a block device (SPDK's `bdev_zone_block`). The table only decides; the device does the
//! physical work (programming pages, erasing blocks) around each decision.
//!
//! States and resources as the specification defines them: a zone is *open* when implicitly
//! or explicitly opened and *active* when open or closed. A write to an empty or closed zone
//! opens it implicitly; when that would pass the open limit, the least recently written
//! implicitly opened zone is closed to make room (the controller behaviour ZNS allows and
//! Linux's null_blk and FEMU implement), and only when every open zone is explicitly opened
//! does the write fail with Too Many Open Zones. A zone whose write pointer reaches its
//! capacity becomes full and releases both resources.
//!
//! The write pointer advances when a write is accepted, not when it completes, so a host may
//! keep several writes to one zone in flight as long as it issues them in order (as zone
//! append exists to avoid). Reads are not the table's business: blocks at or past the write
//! pointer read as zeros.

use crate::command::{ZoneDescriptor, ZoneState};
use crate::error::{DevError, DevResult, ZoneError};
use crate::info::ZoneGeometry;

#[derive(Clone, Copy, Debug)]
struct Zone {
    /// Blocks written, from the zone's start.
    written_blocks: u64,
    state: ZoneState,
    /// When the zone was last written (a counter), to pick the implicitly opened zone to close.
    last_write: u64,
}

/// What a reset, finish or other management command did, so the device can do the physical
/// part: erase the blocks of a reset zone, pad or account a finished one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub zone: u64,
    pub from: ZoneState,
    pub to: ZoneState,
    /// Blocks the zone held before the command.
    pub written_blocks: u64,
}

/// The zones of one namespace.
#[derive(Clone, Debug)]
pub struct ZoneTable {
    geo: ZoneGeometry,
    zones: Vec<Zone>,
    open: u32,
    active: u32,
    clock: u64,
}

fn state_name(s: ZoneState) -> &'static str {
    match s {
        ZoneState::Empty => "empty",
        ZoneState::ImplicitOpen => "implicitly opened",
        ZoneState::ExplicitOpen => "explicitly opened",
        ZoneState::Closed => "closed",
        ZoneState::Full => "full",
        ZoneState::Offline => "offline",
    }
}

fn is_open(s: ZoneState) -> bool {
    matches!(s, ZoneState::ImplicitOpen | ZoneState::ExplicitOpen)
}

fn is_active(s: ZoneState) -> bool {
    is_open(s) || s == ZoneState::Closed
}

impl ZoneTable {
    /// `num_zones` empty zones. The geometry must have `0 < zone_capacity_blocks <= zone_blocks`
    /// and, when both limits are set, `max_open_zones <= max_active_zones`.
    pub fn new(geo: ZoneGeometry, num_zones: u64) -> DevResult<Self> {
        if geo.zone_capacity_blocks == 0 || geo.zone_capacity_blocks > geo.zone_blocks {
            return Err(DevError::Invalid(format!(
                "zone capacity {} blocks must be positive and at most the zone size {} blocks",
                geo.zone_capacity_blocks, geo.zone_blocks
            )));
        }
        if geo.max_open_zones > 0
            && geo.max_active_zones > 0
            && geo.max_open_zones > geo.max_active_zones
        {
            return Err(DevError::Invalid(format!(
                "max_open_zones = {} exceeds max_active_zones = {}",
                geo.max_open_zones, geo.max_active_zones
            )));
        }
        let zone = Zone { written_blocks: 0, state: ZoneState::Empty, last_write: 0 };
        Ok(Self { geo, zones: vec![zone; num_zones as usize], open: 0, active: 0, clock: 0 })
    }

    pub fn geometry(&self) -> &ZoneGeometry {
        &self.geo
    }

    pub fn num_zones(&self) -> u64 {
        self.zones.len() as u64
    }

    /// Zones open now (implicitly or explicitly).
    pub fn open_zones(&self) -> u32 {
        self.open
    }

    /// Zones active now (open or closed).
    pub fn active_zones(&self) -> u32 {
        self.active
    }

    /// The zone holding `lba`.
    pub fn zone_of(&self, lba: u64) -> u64 {
        lba / self.geo.zone_blocks
    }

    pub fn zone_start(&self, zone: u64) -> u64 {
        zone * self.geo.zone_blocks
    }

    pub fn state(&self, zone: u64) -> ZoneState {
        self.zones[zone as usize].state
    }

    /// Blocks written in `zone`, from its start.
    pub fn written_blocks(&self, zone: u64) -> u64 {
        self.zones[zone as usize].written_blocks
    }

    /// The absolute write pointer of `zone`.
    pub fn write_pointer(&self, zone: u64) -> u64 {
        self.zone_start(zone) + self.written_blocks(zone)
    }

    fn zone_index(&self, zone: u64) -> DevResult<usize> {
        if zone >= self.num_zones() {
            return Err(DevError::Invalid(format!(
                "zone {zone} does not exist (the namespace has {} zones)",
                self.num_zones()
            )));
        }
        Ok(zone as usize)
    }

    fn err(zone: u64, error: ZoneError) -> DevError {
        DevError::Zone { zone, error }
    }

    /// Takes an active resource for a zone leaving the empty state.
    fn activate(&mut self, zone: u64) -> DevResult<()> {
        let limit = self.geo.max_active_zones;
        if limit > 0 && self.active >= limit {
            return Err(Self::err(zone, ZoneError::TooManyActive { limit }));
        }
        self.active += 1;
        Ok(())
    }

    /// Takes an open resource, closing the least recently written implicitly opened zone when
    /// the limit is reached.
    fn take_open(&mut self, zone: u64) -> DevResult<()> {
        let limit = self.geo.max_open_zones;
        if limit > 0 && self.open >= limit {
            let victim = self
                .zones
                .iter()
                .enumerate()
                .filter(|(i, z)| *i as u64 != zone && z.state == ZoneState::ImplicitOpen)
                .min_by_key(|(_, z)| z.last_write)
                .map(|(i, _)| i);
            match victim {
                Some(v) => {
                    self.zones[v].state = ZoneState::Closed;
                    self.open -= 1;
                }
                None => return Err(Self::err(zone, ZoneError::TooManyOpen { limit })),
            }
        }
        self.open += 1;
        Ok(())
    }

    /// Opens `zone` (implicitly or explicitly) from its current state, taking the resources it
    /// needs; on failure it holds none it did not hold before.
    fn open_zone(&mut self, zone: u64, to: ZoneState) -> DevResult<()> {
        let from = self.zones[zone as usize].state;
        if from == ZoneState::Empty {
            self.activate(zone)?;
        }
        if !is_open(from) {
            if let Err(e) = self.take_open(zone) {
                if from == ZoneState::Empty {
                    self.active -= 1;
                }
                return Err(e);
            }
        }
        self.zones[zone as usize].state = to;
        Ok(())
    }

    /// Accepts a write of `blocks` blocks at `lba`: it must start at its zone's write pointer
    /// and end within the zone's capacity, in a zone that is empty, open or closed. Opens the
    /// zone implicitly if needed and advances the write pointer; a zone filled to capacity
    /// becomes full.
    pub fn write(&mut self, lba: u64, blocks: u64) -> DevResult<()> {
        let zone = self.zone_of(lba);
        let i = self.zone_index(zone)?;
        let wp = self.write_pointer(zone);
        let end = self.zone_start(zone) + self.geo.zone_capacity_blocks;
        match self.zones[i].state {
            ZoneState::Full => return Err(Self::err(zone, ZoneError::Full)),
            ZoneState::Offline => return Err(Self::err(zone, ZoneError::Offline)),
            _ => {}
        }
        if lba != wp {
            return Err(Self::err(zone, ZoneError::InvalidWrite { lba, write_pointer: wp }));
        }
        if blocks == 0 || lba + blocks > end {
            return Err(Self::err(zone, ZoneError::Boundary { lba, blocks, end }));
        }
        if !is_open(self.zones[i].state) {
            self.open_zone(zone, ZoneState::ImplicitOpen)?;
        }
        self.clock += 1;
        let z = &mut self.zones[i];
        z.written_blocks += blocks;
        z.last_write = self.clock;
        if z.written_blocks == self.geo.zone_capacity_blocks {
            z.state = ZoneState::Full;
            self.open -= 1;
            self.active -= 1;
        }
        Ok(())
    }

    /// Zone append: accepts `blocks` blocks at the write pointer of `zone` and returns the LBA
    /// where they land.
    pub fn append(&mut self, zone: u64, blocks: u64) -> DevResult<u64> {
        self.zone_index(zone)?;
        let lba = self.write_pointer(zone);
        self.write(lba, blocks)?;
        Ok(lba)
    }

    /// Explicit open (Zone Management Send, Open Zone).
    pub fn open(&mut self, zone: u64) -> DevResult<Transition> {
        let i = self.zone_index(zone)?;
        let from = self.zones[i].state;
        match from {
            ZoneState::ExplicitOpen => {}
            ZoneState::Empty | ZoneState::ImplicitOpen | ZoneState::Closed => {
                self.open_zone(zone, ZoneState::ExplicitOpen)?
            }
            s => {
                return Err(Self::err(
                    zone,
                    ZoneError::InvalidTransition { command: "open", state: state_name(s) },
                ))
            }
        }
        Ok(self.transition(zone, from))
    }

    /// Close: an open zone becomes closed (or empty again if nothing was written).
    pub fn close(&mut self, zone: u64) -> DevResult<Transition> {
        let i = self.zone_index(zone)?;
        let from = self.zones[i].state;
        match from {
            ZoneState::Closed => {}
            ZoneState::ImplicitOpen | ZoneState::ExplicitOpen => {
                self.open -= 1;
                if self.zones[i].written_blocks == 0 {
                    self.active -= 1;
                    self.zones[i].state = ZoneState::Empty;
                } else {
                    self.zones[i].state = ZoneState::Closed;
                }
            }
            s => {
                return Err(Self::err(
                    zone,
                    ZoneError::InvalidTransition { command: "close", state: state_name(s) },
                ))
            }
        }
        Ok(self.transition(zone, from))
    }

    /// Finish: the zone becomes full (its write pointer moves to the zone's capacity),
    /// releasing its resources.
    pub fn finish(&mut self, zone: u64) -> DevResult<Transition> {
        let i = self.zone_index(zone)?;
        let from = self.zones[i].state;
        let written = self.zones[i].written_blocks;
        match from {
            ZoneState::Full => {}
            ZoneState::Empty
            | ZoneState::ImplicitOpen
            | ZoneState::ExplicitOpen
            | ZoneState::Closed => {
                if is_open(from) {
                    self.open -= 1;
                }
                if is_active(from) {
                    self.active -= 1;
                }
                self.zones[i].state = ZoneState::Full;
                self.zones[i].written_blocks = self.geo.zone_capacity_blocks;
            }
            s => {
                return Err(Self::err(
                    zone,
                    ZoneError::InvalidTransition { command: "finish", state: state_name(s) },
                ))
            }
        }
        Ok(Transition { zone, from, to: ZoneState::Full, written_blocks: written })
    }

    /// Reset: the zone becomes empty with its write pointer at its start.
    pub fn reset(&mut self, zone: u64) -> DevResult<Transition> {
        let i = self.zone_index(zone)?;
        let from = self.zones[i].state;
        let written = self.zones[i].written_blocks;
        if from == ZoneState::Offline {
            return Err(Self::err(zone, ZoneError::Offline));
        }
        if is_open(from) {
            self.open -= 1;
        }
        if is_active(from) {
            self.active -= 1;
        }
        self.zones[i] = Zone { written_blocks: 0, state: ZoneState::Empty, last_write: 0 };
        Ok(Transition { zone, from, to: ZoneState::Empty, written_blocks: written })
    }

    /// Takes `zone` offline (a failed zone: reads and writes fail until the device is replaced).
    pub fn set_offline(&mut self, zone: u64) -> DevResult<()> {
        let i = self.zone_index(zone)?;
        let from = self.zones[i].state;
        if is_open(from) {
            self.open -= 1;
        }
        if is_active(from) {
            self.active -= 1;
        }
        self.zones[i].state = ZoneState::Offline;
        Ok(())
    }

    /// Sets a zone's write pointer after a restart, from what the device finds on its media:
    /// no blocks is empty, capacity is full, anything between is closed (open zones do not
    /// survive a power cycle). Fails when the restored zones pass the active limit.
    pub fn restore(&mut self, zone: u64, written_blocks: u64, finished: bool) -> DevResult<()> {
        let i = self.zone_index(zone)?;
        self.reset(zone)?;
        if written_blocks > self.geo.zone_capacity_blocks {
            return Err(DevError::Invalid(format!(
                "zone {zone}: {written_blocks} blocks written exceed its capacity {}",
                self.geo.zone_capacity_blocks
            )));
        }
        if finished || written_blocks == self.geo.zone_capacity_blocks {
            self.zones[i].state = ZoneState::Full;
            self.zones[i].written_blocks = self.geo.zone_capacity_blocks;
        } else if written_blocks > 0 {
            self.activate(zone)?;
            self.zones[i].state = ZoneState::Closed;
            self.zones[i].written_blocks = written_blocks;
        }
        Ok(())
    }

    fn transition(&self, zone: u64, from: ZoneState) -> Transition {
        let z = &self.zones[zone as usize];
        Transition { zone, from, to: z.state, written_blocks: z.written_blocks }
    }

    /// The descriptor of `zone`, as Report Zones gives it.
    pub fn descriptor(&self, zone: u64) -> ZoneDescriptor {
        let z = &self.zones[zone as usize];
        ZoneDescriptor {
            start_lba: self.zone_start(zone),
            write_pointer: self.zone_start(zone) + z.written_blocks,
            capacity_blocks: self.geo.zone_capacity_blocks,
            state: z.state,
        }
    }

    /// Report Zones: up to `max_zones` descriptors from `first_zone` on.
    pub fn report(&self, first_zone: u64, max_zones: u64) -> DevResult<Vec<ZoneDescriptor>> {
        if first_zone > self.num_zones() {
            self.zone_index(first_zone)?;
        }
        let end = first_zone.saturating_add(max_zones).min(self.num_zones());
        Ok((first_zone..end).map(|z| self.descriptor(z)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(open: u32, active: u32) -> ZoneTable {
        let geo = ZoneGeometry {
            zone_blocks: 16,
            zone_capacity_blocks: 12,
            max_open_zones: open,
            max_active_zones: active,
        };
        ZoneTable::new(geo, 8).unwrap()
    }

    fn zone_err(r: DevResult<impl std::fmt::Debug>) -> ZoneError {
        match r {
            Err(DevError::Zone { error, .. }) => error,
            other => panic!("expected a zone error, got {other:?}"),
        }
    }

    #[test]
    fn writes_must_start_at_the_write_pointer_and_stay_within_capacity() {
        let mut t = table(0, 0);
        t.write(0, 4).unwrap();
        assert_eq!(t.state(0), ZoneState::ImplicitOpen);
        assert_eq!(t.write_pointer(0), 4);
        assert_eq!(zone_err(t.write(2, 1)), ZoneError::InvalidWrite { lba: 2, write_pointer: 4 });
        assert_eq!(zone_err(t.write(4, 9)), ZoneError::Boundary { lba: 4, blocks: 9, end: 12 });
        t.write(4, 8).unwrap();
        assert_eq!(t.state(0), ZoneState::Full);
        assert_eq!((t.open_zones(), t.active_zones()), (0, 0));
        assert_eq!(zone_err(t.write(12, 1)), ZoneError::Full);
        // The gap between capacity and zone size is never writable.
        assert_eq!(zone_err(t.write(16, 13)), ZoneError::Boundary { lba: 16, blocks: 13, end: 28 });
    }

    #[test]
    fn append_returns_where_the_data_landed() {
        let mut t = table(0, 0);
        assert_eq!(t.append(2, 3).unwrap(), 32);
        assert_eq!(t.append(2, 5).unwrap(), 35);
        assert_eq!(zone_err(t.append(2, 5)), ZoneError::Boundary { lba: 40, blocks: 5, end: 44 });
        assert!(matches!(t.append(9, 1), Err(DevError::Invalid(_))));
    }

    #[test]
    fn the_open_limit_closes_the_least_recently_written_implicit_zone() {
        let mut t = table(2, 0);
        t.write(0, 1).unwrap();
        t.write(16, 1).unwrap();
        t.write(1, 1).unwrap(); // zone 0 is now the more recent
        t.write(32, 1).unwrap(); // closes zone 1
        assert_eq!(t.state(1), ZoneState::Closed);
        assert_eq!((t.state(0), t.state(2)), (ZoneState::ImplicitOpen, ZoneState::ImplicitOpen));
        assert_eq!((t.open_zones(), t.active_zones()), (2, 3));
        // Explicitly opened zones are never closed for room.
        t.open(0).unwrap();
        t.open(2).unwrap();
        assert_eq!(zone_err(t.write(48, 1)), ZoneError::TooManyOpen { limit: 2 });
        assert_eq!(t.state(3), ZoneState::Empty);
        assert_eq!(t.active_zones(), 3, "a refused write takes no resource");
    }

    #[test]
    fn the_active_limit_counts_closed_zones() {
        let mut t = table(2, 3);
        for z in 0..3 {
            t.write(z * 16, 1).unwrap();
        }
        assert_eq!(zone_err(t.write(48, 1)), ZoneError::TooManyActive { limit: 3 });
        // Finishing one frees an active resource.
        t.finish(1).unwrap();
        assert_eq!(t.write_pointer(1), 16 + 12);
        t.write(48, 1).unwrap();
        assert_eq!(t.active_zones(), 3);
        assert!(ZoneTable::new(
            ZoneGeometry {
                zone_blocks: 4,
                zone_capacity_blocks: 4,
                max_open_zones: 4,
                max_active_zones: 2
            },
            1
        )
        .is_err());
    }

    #[test]
    fn reset_close_and_finish_follow_the_state_machine() {
        let mut t = table(0, 0);
        t.open(0).unwrap();
        assert_eq!(
            t.close(0).unwrap().to,
            ZoneState::Empty,
            "closing an unwritten zone empties it"
        );
        t.write(0, 3).unwrap();
        assert_eq!(t.close(0).unwrap().to, ZoneState::Closed);
        assert_eq!(t.active_zones(), 1);
        let r = t.reset(0).unwrap();
        assert_eq!((r.from, r.to, r.written_blocks), (ZoneState::Closed, ZoneState::Empty, 3));
        assert_eq!((t.write_pointer(0), t.active_zones()), (0, 0));
        t.finish(0).unwrap();
        assert_eq!(
            zone_err(t.open(0)),
            ZoneError::InvalidTransition { command: "open", state: "full" }
        );
        assert_eq!(
            zone_err(t.close(0)),
            ZoneError::InvalidTransition { command: "close", state: "full" }
        );
        t.set_offline(3).unwrap();
        assert_eq!(zone_err(t.write(48, 1)), ZoneError::Offline);
        assert_eq!(zone_err(t.reset(3)), ZoneError::Offline);
    }

    #[test]
    fn restore_rebuilds_states_from_written_blocks() {
        let mut t = table(0, 2);
        t.restore(0, 0, false).unwrap();
        t.restore(1, 5, false).unwrap();
        t.restore(2, 12, false).unwrap();
        t.restore(3, 2, true).unwrap();
        let states: Vec<_> = t.report(0, 4).unwrap().iter().map(|d| d.state).collect();
        assert_eq!(states, [ZoneState::Empty, ZoneState::Closed, ZoneState::Full, ZoneState::Full]);
        assert_eq!(t.write_pointer(1), 21);
        t.restore(4, 1, false).unwrap();
        assert_eq!(zone_err(t.restore(5, 1, false)), ZoneError::TooManyActive { limit: 2 });
        assert_eq!(t.report(6, 10).unwrap().len(), 2);
    }
}
