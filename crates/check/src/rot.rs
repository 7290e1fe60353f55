//! `Rot`: a pass-through layer that injects the silent faults per-block checksums exist for.
//!
//! Unlike a failed drive (see [`crate::Failable`]), these faults answer success and leave
//! wrong contents behind, so only an engine that checks what it reads can notice them:
//!
//! - **bit rot**: [`Rot::flip`] flips one bit of a stored block's data and leaves its metadata
//!   as it was (a cell that lost its charge, a bus error that escaped the device's ECC);
//! - **lost write**: an armed write completes without reaching the layer below, which keeps
//!   the block's previous contents (firmware that acknowledged a write it dropped);
//! - **misdirected write**: an armed write lands at another address of the same device, whose
//!   contents it overwrites, and the intended address keeps its previous contents.
//!
//! - **a slow member**: [`Rot::set_delay_ns`] adds a fixed delay to every command (a drive
//!   retrying reads, a failing link), which an engine should route reads around.
//!
//! Faults are armed by count ("the n-th write from now"), so a seeded plan replays exactly.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use flashrig_blockdev::{DevRef, DevResult, WriteHints};
use parking_lot::Mutex;

use crate::tap::{Cmd, Tap, Tapped};

/// What happens to an armed write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteFault {
    /// Acknowledged, never stored.
    Lose,
    /// Stored `shift_blocks` further on (wrapping inside the device), not where it was sent.
    Misdirect { shift_blocks: u64 },
}

/// How many faults of each kind a [`Rot`] has injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RotCounts {
    pub flipped_blocks: u64,
    pub lost_writes: u64,
    pub misdirected_writes: u64,
}

/// A device with silent faults: [`Faults`] tapped over the device below.
pub type Rot = Tapped<Faults>;

/// A [`Rot`]'s armed faults, its counts and its delay.
pub struct Faults {
    /// Armed write faults: (writes still to pass before it fires, fault).
    armed: Mutex<Vec<(u64, WriteFault)>>,
    flipped: AtomicU64,
    lost: AtomicU64,
    misdirected: AtomicU64,
    /// Added to every command but vendor commands (0: none).
    delay_ns: AtomicU64,
}

impl Rot {
    pub fn new(inner: DevRef) -> Self {
        Tapped::over(
            inner,
            Faults {
                armed: Mutex::new(Vec::new()),
                flipped: AtomicU64::new(0),
                lost: AtomicU64::new(0),
                misdirected: AtomicU64::new(0),
                delay_ns: AtomicU64::new(0),
            },
        )
    }

    /// Flips bit `bit % (block bits)` of the block at `lba` and writes it back with its old
    /// metadata. The rewrite is an ordinary write to the layer below (durable at its next
    /// flush), so the corruption survives like the data around it.
    pub async fn flip(&self, lba: u64, bit: u64) -> DevResult<()> {
        let below = self.below();
        let info = below.info();
        let bs = info.block_size as usize;
        let mdb = info.md_bytes_per_block as usize;
        let mut data = vec![0u8; bs];
        let mut md = vec![0u8; mdb];
        let md_arg = (mdb > 0).then_some(md.as_mut_slice());
        below.read(lba, &mut data, md_arg).await?;
        let bit = bit % (bs as u64 * 8);
        data[(bit / 8) as usize] ^= 1 << (bit % 8);
        let md_arg = (mdb > 0).then_some(md.as_slice());
        below.write(lba, &data, md_arg, WriteHints::NONE).await?;
        self.flipped.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Faults {
    /// Makes every later command take `delay_ns` longer (0: back to normal).
    pub fn set_delay_ns(&self, delay_ns: u64) {
        self.delay_ns.store(delay_ns, Ordering::Relaxed);
    }

    /// Arms `fault` for the write `n` writes from now (0: the next one).
    pub fn arm(&self, n: u64, fault: WriteFault) {
        self.armed.lock().push((n, fault));
    }

    /// Forgets every armed fault that has not fired.
    pub fn disarm(&self) {
        self.armed.lock().clear();
    }

    pub fn counts(&self) -> RotCounts {
        RotCounts {
            flipped_blocks: self.flipped.load(Ordering::Relaxed),
            lost_writes: self.lost.load(Ordering::Relaxed),
            misdirected_writes: self.misdirected.load(Ordering::Relaxed),
        }
    }

    /// Counts one write down on every armed fault; returns the fault that fires now, if any.
    fn next_write(&self) -> Option<WriteFault> {
        let mut armed = self.armed.lock();
        let mut fired = None;
        armed.retain_mut(|(n, f)| {
            if *n == 0 {
                fired.get_or_insert(*f);
                false
            } else {
                *n -= 1;
                true
            }
        });
        fired
    }
}

#[async_trait(?Send)]
impl Tap for Faults {
    fn kind(&self) -> &'static str {
        "rot"
    }

    async fn before(&self, _below: &DevRef, cmd: Cmd) -> DevResult<()> {
        let ns = self.delay_ns.load(Ordering::Relaxed);
        if ns > 0 && cmd != Cmd::Vendor {
            flashrig_runtime::sleep_ns(ns).await;
        }
        Ok(())
    }

    async fn write(
        &self,
        below: &DevRef,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        match self.next_write() {
            None => below.write(lba, data, md, hints).await,
            Some(WriteFault::Lose) => {
                // The command is checked as the device below would check it, so a lost write
                // is never a bad request answered with success.
                let info = below.info();
                flashrig_blockdev::check_io(info, lba, data.len(), md.map(|m| m.len()))?;
                self.lost.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Some(WriteFault::Misdirect { shift_blocks }) => {
                let info = below.info();
                let blocks =
                    flashrig_blockdev::check_io(info, lba, data.len(), md.map(|m| m.len()))?;
                // Targets are the addresses where the whole write fits; the intended one is
                // skipped, so the fault always moves the write.
                let targets = info.num_blocks - blocks + 1;
                if targets < 2 {
                    self.lost.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                let mut to = (lba + shift_blocks % targets) % targets;
                if to == lba {
                    to = (to + 1) % targets;
                }
                self.misdirected.fetch_add(1, Ordering::Relaxed);
                below.write(to, data, md, hints).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrig_blockdev::BlockDevice;
    use flashrig_devices::RamDevice;
    use flashrig_runtime::{run, RuntimeKind};
    use std::sync::Arc;

    fn block(v: u8) -> Vec<u8> {
        vec![v; 4096]
    }

    async fn read(d: &dyn BlockDevice, lba: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        d.read(lba, &mut b, None).await.unwrap();
        b
    }

    #[test]
    fn flips_lost_and_misdirected_writes_leave_the_promised_contents() {
        let (res, _) = run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("r", 4096, 16, 16, 0));
            let rot = Rot::new(ram.clone());
            rot.write(3, &block(7), None, WriteHints::NONE).await.unwrap();
            rot.flip(3, 12).await.unwrap();
            let got = read(&rot, 3).await;
            assert_eq!(got[1], 7 ^ (1 << 4), "bit 12 is bit 4 of byte 1");
            assert_eq!(got.iter().filter(|&&b| b != 7).count(), 1);

            rot.arm(1, WriteFault::Lose);
            rot.arm(2, WriteFault::Misdirect { shift_blocks: 5 });
            rot.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            rot.write(1, &block(2), None, WriteHints::NONE).await.unwrap();
            rot.write(2, &block(3), None, WriteHints::NONE).await.unwrap();
            assert_eq!(read(&rot, 0).await, block(1), "writes before the armed one land");
            assert_eq!(read(&rot, 1).await, block(0), "the lost write left the old contents");
            assert_eq!(read(&rot, 2).await, block(0), "the misdirected write missed its target");
            assert_eq!(read(&rot, 7).await, block(3), "and landed five blocks on");
            assert_eq!(
                rot.counts(),
                RotCounts { flipped_blocks: 1, lost_writes: 1, misdirected_writes: 1 }
            );
        });
        res
    }
}
