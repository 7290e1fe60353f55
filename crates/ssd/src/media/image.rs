//! The NAND image file: what an SSD with a `backing` file keeps of its media on disk, so the
//! device comes back after its process stops or is killed, as a real SSD comes back after a
//! power cut.
//!
//! Only what survives a power loss is written: every programmed slot (its OOB and payload),
//! each line's erase count, open generation and closing sequence number, and the durable trim
//! records. The L2P table, valid counts and free lists stay volatile and are rebuilt at start
//! by the same recovery that follows a power loss (`firmware::recover`). Writes go through
//! to the file as the firmware programs, so a process killed with SIGKILL leaves in the file
//! (the kernel's page cache) everything the firmware had programmed; what sat in the DRAM
//! write buffer is lost, as in a power cut without power-loss protection.
//!
//! Layout (all integers little endian; docs/formats.md has the same table):
//!
//! | bytes | what |
//! |---|---|
//! | 0..4096 | header: `"FRSSDIM1"`, version u32, then u64s: payload mode (0 full, 1 tag, 2 none), block bytes, metadata bytes per block, blocks per unit, lines, slots per line (the larger mode's), SLC lines, logical units, image bytes per slot, slot record bytes; crc32c of bytes 0..124 at 124..128 |
//! | 4096.. | line table, 32 bytes per line: generation u32 (0 = never opened), erase count u32, closed sequence u64 (0 = open), reserved |
//! | slot area (4 KiB aligned) | per line, per slot: a record of `SLOT_HEADER_BYTES` (unit u32, generation u32, sequence u64, flags u8, reserved) and the unit's image bytes |
//!
//! A slot record counts only when its generation equals its line's: records of a line's
//! earlier lives (before an erase) are ignored without being cleared, so an erase costs one
//! line-table write. Trim records go to a sidecar file, `<image>.trims`: 16-byte records
//! (unit u32, reserved u32, sequence u64), appended as trims arrive and rewritten compactly
//! at each start.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::layout::Layout;
use super::store::Shape;
use crate::config::PayloadMode;

const MAGIC: &[u8; 8] = b"FRSSDIM1";
const VERSION: u32 = 1;
const HEADER_BYTES: u64 = 4096;
const LINE_ENTRY_BYTES: u64 = 32;
/// Bytes before a slot's image in its record.
pub const SLOT_HEADER_BYTES: usize = 24;
const TRIM_RECORD_BYTES: usize = 16;

// The header holds the unit (4), generation (4), sequence (8) and flags (1).
const _: () = assert!(SLOT_HEADER_BYTES > 4 + 4 + 8);
const _: () = assert!(LINE_ENTRY_BYTES >= 4 + 4 + 8);

/// One line's persistent state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineEntry {
    pub generation: u32,
    pub erase_count: u32,
    /// 0 while the line is open (or free).
    pub closed_seq: u64,
}

/// The header fields of a slot record, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotHeader {
    pub lpn: u32,
    /// The line's generation when the slot was programmed; records of older generations are stale.
    pub generation: u32,
    pub seq: u64,
    pub flags: u8,
}

/// A slot record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    pub lpn: u32,
    pub seq: u64,
    pub flags: u8,
    pub image: Vec<u8>,
}

/// What the image holds at start-up.
pub struct Loaded {
    pub lines: Vec<LineEntry>,
    pub trims: Vec<(u32, u64)>,
    /// The image was created just now (nothing to recover).
    pub created: bool,
}

/// The open image file.
pub struct NandImage {
    path: PathBuf,
    file: File,
    trims: File,
    lines: u64,
    max_slots: u64,
    image_len: usize,
    record_len: u64,
    slot_base: u64,
    /// The first I/O error; the device fails its commands from then on.
    error: Option<String>,
}

fn payload_code(m: PayloadMode) -> u64 {
    match m {
        PayloadMode::Full => 0,
        PayloadMode::Tag => 1,
        PayloadMode::None => 2,
    }
}

fn trims_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".trims");
    PathBuf::from(p)
}

impl NandImage {
    /// Opens the image at `path` for a device of this layout and shape, creating it when it
    /// does not exist (or is empty). An image made for another geometry, payload mode or
    /// metadata size is refused, naming what differs.
    pub fn open(
        path: &Path,
        layout: &Layout,
        shape: &Shape,
    ) -> Result<(NandImage, Loaded), String> {
        let what = |e: std::io::Error| format!("ssd image {}: {e}", path.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(what)?;
        let max_slots = layout.slots_per_line(true).max(layout.slots_per_line(false)) as u64;
        let image_len = shape.image_len();
        let record_len = (SLOT_HEADER_BYTES + image_len).next_multiple_of(8) as u64;
        let lines = layout.lines as u64;
        let slot_base = (HEADER_BYTES + lines * LINE_ENTRY_BYTES).next_multiple_of(4096);
        // The settings a user chooses come first, so a mismatch names the one they changed
        // rather than a size derived from it.
        let fields: [(&str, u64); 10] = [
            ("payload mode", payload_code(shape.mode)),
            ("block bytes", shape.block_bytes as u64),
            ("metadata bytes per block", shape.md_bytes as u64),
            ("blocks per mapping unit", shape.blocks_per_iu as u64),
            ("lines", lines),
            ("slots per line", max_slots),
            ("SLC lines", layout.slc_lines as u64),
            ("logical units", layout.logical_ius),
            ("image bytes per slot", image_len as u64),
            ("slot record bytes", record_len),
        ];
        let mut header = vec![0u8; HEADER_BYTES as usize];
        header[0..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        for (i, (_, v)) in fields.iter().enumerate() {
            header[12 + i * 8..20 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&header[..124]);
        header[124..128].copy_from_slice(&crc.to_le_bytes());

        let len = file.metadata().map_err(what)?.len();
        let created = len == 0;
        if created {
            file.write_all_at(&header, 0).map_err(what)?;
            file.set_len(slot_base + lines * max_slots * record_len).map_err(what)?;
            let _ = std::fs::remove_file(trims_path(path));
        } else {
            let mut have = vec![0u8; HEADER_BYTES as usize];
            file.read_exact_at(&mut have, 0).map_err(|e| {
                format!("ssd image {}: too short for a header ({e})", path.display())
            })?;
            if have[0..8] != *MAGIC {
                return Err(format!(
                    "ssd image {}: not a flashrig SSD image (no {:?} magic); remove it or name \
                     another file",
                    path.display(),
                    std::str::from_utf8(MAGIC).unwrap()
                ));
            }
            let stored_crc = u32::from_le_bytes(have[124..128].try_into().unwrap());
            if crc32c::crc32c(&have[..124]) != stored_crc {
                return Err(format!(
                    "ssd image {}: the header's checksum is wrong",
                    path.display()
                ));
            }
            for (i, (name, want)) in fields.iter().enumerate() {
                let got = u64::from_le_bytes(have[12 + i * 8..20 + i * 8].try_into().unwrap());
                if got != *want {
                    return Err(format!(
                        "ssd image {} was made for another device: {name} is {got} there, {want} \
                         in this configuration (same preset, payload and metadata size needed)",
                        path.display()
                    ));
                }
            }
        }
        let trims_file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(trims_path(path))
            .map_err(what)?;
        let img = NandImage {
            path: path.to_path_buf(),
            file,
            trims: trims_file,
            lines,
            max_slots,
            image_len,
            record_len,
            slot_base,
            error: None,
        };
        let loaded = Loaded {
            lines: if created {
                vec![LineEntry::default(); lines as usize]
            } else {
                img.read_lines()?
            },
            trims: if created { Vec::new() } else { img.read_trims()? },
            created,
        };
        Ok((img, loaded))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn note(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            if self.error.is_none() {
                self.error = Some(format!("ssd image {}: {e}", self.path.display()));
            }
        }
    }

    fn read_lines(&self) -> Result<Vec<LineEntry>, String> {
        let mut buf = vec![0u8; (self.lines * LINE_ENTRY_BYTES) as usize];
        self.file
            .read_exact_at(&mut buf, HEADER_BYTES)
            .map_err(|e| format!("ssd image {}: line table: {e}", self.path.display()))?;
        Ok(buf
            .chunks_exact(LINE_ENTRY_BYTES as usize)
            .map(|c| LineEntry {
                generation: u32::from_le_bytes(c[0..4].try_into().unwrap()),
                erase_count: u32::from_le_bytes(c[4..8].try_into().unwrap()),
                closed_seq: u64::from_le_bytes(c[8..16].try_into().unwrap()),
            })
            .collect())
    }

    fn read_trims(&self) -> Result<Vec<(u32, u64)>, String> {
        let p = trims_path(&self.path);
        let bytes = std::fs::read(&p).map_err(|e| format!("ssd image {}: {e}", p.display()))?;
        // A record torn by a kill at the end of the file is dropped: its trim had not been
        // acknowledged (the append completes before the trim does).
        Ok(bytes
            .chunks_exact(TRIM_RECORD_BYTES)
            .map(|c| {
                (
                    u32::from_le_bytes(c[0..4].try_into().unwrap()),
                    u64::from_le_bytes(c[8..16].try_into().unwrap()),
                )
            })
            .collect())
    }

    /// Reads the records of `line` whose generation is `generation`: (slot, record).
    pub fn read_line(&self, line: u32, generation: u32) -> Result<Vec<(u32, SlotRecord)>, String> {
        let mut buf = vec![0u8; (self.max_slots * self.record_len) as usize];
        self.file
            .read_exact_at(&mut buf, self.slot_offset(line, 0))
            .map_err(|e| format!("ssd image {}: line {line}: {e}", self.path.display()))?;
        let mut out = Vec::new();
        for (s, rec) in buf.chunks_exact(self.record_len as usize).enumerate() {
            if u32::from_le_bytes(rec[4..8].try_into().unwrap()) != generation {
                continue;
            }
            out.push((
                s as u32,
                SlotRecord {
                    lpn: u32::from_le_bytes(rec[0..4].try_into().unwrap()),
                    seq: u64::from_le_bytes(rec[8..16].try_into().unwrap()),
                    flags: rec[16],
                    image: rec[SLOT_HEADER_BYTES..SLOT_HEADER_BYTES + self.image_len].to_vec(),
                },
            ));
        }
        Ok(out)
    }

    fn slot_offset(&self, line: u32, slot: u32) -> u64 {
        self.slot_base + (line as u64 * self.max_slots + slot as u64) * self.record_len
    }

    /// Records a line's state (at open, close and erase).
    pub fn write_line(&mut self, line: u32, e: LineEntry) {
        let mut b = [0u8; LINE_ENTRY_BYTES as usize];
        b[0..4].copy_from_slice(&e.generation.to_le_bytes());
        b[4..8].copy_from_slice(&e.erase_count.to_le_bytes());
        b[8..16].copy_from_slice(&e.closed_seq.to_le_bytes());
        let r = self.file.write_all_at(&b, HEADER_BYTES + line as u64 * LINE_ENTRY_BYTES);
        self.note(r);
    }

    /// Records a programmed slot.
    pub fn write_slot(&mut self, line: u32, slot: u32, h: SlotHeader, image: &[u8]) {
        let mut rec = vec![0u8; SLOT_HEADER_BYTES + image.len()];
        rec[0..4].copy_from_slice(&h.lpn.to_le_bytes());
        rec[4..8].copy_from_slice(&h.generation.to_le_bytes());
        rec[8..16].copy_from_slice(&h.seq.to_le_bytes());
        rec[16] = h.flags;
        rec[SLOT_HEADER_BYTES..].copy_from_slice(image);
        let r = self.file.write_all_at(&rec, self.slot_offset(line, slot));
        self.note(r);
    }

    /// Appends a trim record.
    pub fn write_trim(&mut self, lpn: u32, seq: u64) {
        let mut b = [0u8; TRIM_RECORD_BYTES];
        b[0..4].copy_from_slice(&lpn.to_le_bytes());
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        let r = self.trims.write_all(&b);
        self.note(r);
    }

    /// Rewrites the trim file with only `trims` (at start, after recovery): write a new file,
    /// then rename it over the old one, so a kill in between leaves one or the other whole.
    pub fn compact_trims(&mut self, trims: impl Iterator<Item = (u32, u64)>) -> Result<(), String> {
        let p = trims_path(&self.path);
        let tmp = {
            let mut t = p.as_os_str().to_owned();
            t.push(".new");
            PathBuf::from(t)
        };
        let what = |e: std::io::Error| format!("ssd image {}: {e}", p.display());
        let mut bytes = Vec::new();
        for (lpn, seq) in trims {
            let mut b = [0u8; TRIM_RECORD_BYTES];
            b[0..4].copy_from_slice(&lpn.to_le_bytes());
            b[8..16].copy_from_slice(&seq.to_le_bytes());
            bytes.extend_from_slice(&b);
        }
        std::fs::write(&tmp, &bytes).map_err(what)?;
        std::fs::rename(&tmp, &p).map_err(what)?;
        self.trims = OpenOptions::new().append(true).open(&p).map_err(what)?;
        Ok(())
    }

    /// Makes what was written durable against a crash of the machine too (not needed for a
    /// killed process: the page cache keeps it).
    pub fn sync(&mut self) {
        let r = self.file.sync_data().and_then(|()| self.trims.sync_data());
        self.note(r);
    }
}
