//! The reduced-scale rules: how much a reproduction runs (`Mode`) and how the papers' SSDs
//! shrink so that a run takes minutes instead of hours while every SSD keeps its bandwidth.
//!
//! Only the blocks get shorter: the channels, dies and NAND timing that set an SSD's bandwidth
//! stay, every line (one block of each plane) keeps its place, so the line-counted parameters
//! (SLC lines, GC and evictor thresholds) stay the preset's, and the capacity, the SLC cache,
//! the run times and the trace lengths all shrink by the same factor, so the bytes written
//! relative to each of them are the full-scale run's.

use flashrig_frontends::config::DeviceConfig;
use flashrig_ssd::SsdConfig;

/// FEMU's GC thresholds as fractions of the dense lines, from the preset's sources
/// (`gc_thres_pcent_high = 95`: foreground GC at 5% free; `gc_thres_pcent = 75`: background at
/// 25% free).
const FEMU_GC_FOREGROUND_FREE: f64 = 0.05;
const FEMU_GC_BACKGROUND_FREE: f64 = 0.25;
/// Requests a smoke run replays of a trace, whatever its length.
const SMOKE_TRACE_REQUESTS: u64 = 300;

/// How much to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The smallest sizes, for flashrig's own test (`--smoke`): every figure and table, almost
    /// no I/O. Not a reproduction.
    Smoke,
    /// `--quick`: SSDs and runs at 1/32, fewer I/O threads.
    Quick,
    /// SSDs and runs at 1/8, every thread count.
    Full,
}

impl Mode {
    /// How the mode is named in the document and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Smoke => "--smoke",
            Mode::Quick => "--quick",
            Mode::Full => "full",
        }
    }
    /// The command-line flag that selects the mode (empty for the full run).
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Smoke => " --smoke",
            Mode::Quick => " --quick",
            Mode::Full => "",
        }
    }
    /// How the member SSDs shrink: (blocks per plane, pages per block) divided by these.
    /// Only the blocks get shorter: every line (one block of each plane) keeps its place, so
    /// the SLC cache keeps its 43 lines and the GC and evictor thresholds, all counted in
    /// lines, stay the preset's (docs/reproduce-scalaafa.md measures the alternative).
    pub fn reduction(self) -> (u64, u64) {
        match self {
            Mode::Full => (1, 8),
            Mode::Quick | Mode::Smoke => (1, 32),
        }
    }
    /// The factor capacities, SLC caches, run times and trace lengths are divided by.
    pub fn divisor(self) -> u64 {
        let (b, p) = self.reduction();
        b * p
    }
    /// A run time of the full-scale experiments, scaled (a smoke run lasts 1 ms).
    pub fn scaled_runtime_ms(self, full_scale_ms: u64) -> u64 {
        match self {
            Mode::Smoke => 1,
            _ => (full_scale_ms as f64 / self.divisor() as f64).round() as u64,
        }
    }
    /// A trace length of the paper's, scaled (a smoke run replays a few hundred requests).
    pub fn scaled_requests(self, full_scale_requests: f64) -> u64 {
        match self {
            Mode::Smoke => SMOKE_TRACE_REQUESTS,
            _ => (full_scale_requests / self.divisor() as f64).round() as u64,
        }
    }
}

/// Shrinks a `scalaafa-femu` SSD: blocks per plane divided by `blocks_div`, pages per block
/// by `pages_div`, the SLC cache by both, and the GC thresholds recomputed from FEMU's
/// percentages of the dense lines as the preset does (clamped to what the layout allows).
/// Other SSDs are left alone.
pub fn reduce_ssd(cfg: &mut SsdConfig, (blocks_div, pages_div): (u64, u64)) -> Result<(), String> {
    let div = blocks_div * pages_div;
    if cfg.preset.as_deref() != Some("scalaafa-femu") || div == 1 {
        return Ok(());
    }
    let g = &mut cfg.geometry;
    let bits = cfg.nand.cell.bits() as u64;
    if !(g.blocks_per_plane as u64).is_multiple_of(blocks_div)
        || !(g.pages_per_block as u64).is_multiple_of(pages_div * bits)
        || !cfg.firmware.slc_cache_bytes.is_multiple_of(div)
    {
        return Err(format!("scalaafa-femu cannot be divided by {blocks_div} x {pages_div}"));
    }
    g.blocks_per_plane = (g.blocks_per_plane as u64 / blocks_div) as u32;
    g.pages_per_block = (g.pages_per_block as u64 / pages_div) as u32;
    cfg.firmware.slc_cache_bytes /= div;
    // A block is erased once per `pages_per_block` programs, so blocks with fewer pages would
    // spend a larger share of each plane's time erasing (at 1/8 an SLC erase would be 45% of a
    // line's plane time instead of 9%). Dividing the erase time by the same factor keeps the
    // erase time per programmed page, and with it the plane time's shares, the preset's.
    cfg.nand.erase_ns /= pages_div;
    cfg.nand.slc_erase_ns /= pages_div;
    femu_gc_thresholds(cfg)?;
    let why = format!("reduced 1/{div} by `flashrig reproduce` (docs/reproduce-scalaafa.md)");
    for key in [
        "geometry.blocks_per_plane",
        "geometry.pages_per_block",
        "firmware.slc_cache_bytes",
        "firmware.gc_foreground_free_lines",
        "firmware.gc_background_free_lines",
    ] {
        cfg.sources.insert(key.into(), why.clone());
    }
    let why = format!(
        "divided by {pages_div} with the pages per block by `flashrig reproduce`, keeping the \
         erase time per programmed page (docs/reproduce-scalaafa.md)"
    );
    for key in ["nand.erase_ns", "nand.slc_erase_ns"] {
        cfg.sources.insert(key.into(), why.clone());
    }
    cfg.validate()
}

/// The preset's GC thresholds for the configuration's line count: 5% and 25% of the dense
/// lines (FEMU's `gc_thres_pcent_high` and `gc_thres_pcent`), at least 1, background clamped to
/// the spare lines minus the 3 open lines.
pub fn femu_gc_thresholds(cfg: &mut SsdConfig) -> Result<(), String> {
    cfg.firmware.gc_foreground_free_lines = 1;
    cfg.firmware.gc_background_free_lines = 1;
    let l = flashrig_ssd::media::Layout::new(cfg)?;
    let dense = (l.lines - l.slc_lines) as u64;
    let logical_lines = l.logical_ius.div_ceil(l.slots_per_line_native as u64);
    let spare = dense.saturating_sub(logical_lines);
    let fg = ((dense as f64 * FEMU_GC_FOREGROUND_FREE).floor() as u64).max(1);
    let bg = ((dense as f64 * FEMU_GC_BACKGROUND_FREE).floor() as u64)
        .min(spare.saturating_sub(3))
        .max(fg);
    cfg.firmware.gc_foreground_free_lines = fg as u32;
    cfg.firmware.gc_background_free_lines = bg as u32;
    Ok(())
}

/// A count of the full-scale configuration that is a share of something the reduction shrinks,
/// scaled with it (at least 1): ScalaAFA's grant batch of 1,024 VHs is 1.25% of the VHs of a
/// full-scale member's transient area; unscaled at 1/8 it would be 10%.
pub fn scaled_count(full_scale: usize, mode: Mode) -> usize {
    (full_scale as u64 / mode.divisor()).max(1) as usize
}

/// Shrinks every SSD of a device tree by `div` (see [`reduce_ssd`]).
pub fn reduce_device(d: &mut DeviceConfig, div: (u64, u64)) -> Result<(), String> {
    let (members, member): (&mut Vec<DeviceConfig>, &mut Option<Box<DeviceConfig>>) = match d {
        DeviceConfig::Ssd(s) => return reduce_ssd(&mut s.0, div),
        DeviceConfig::Raid(r) => (&mut r.members, &mut r.member),
        DeviceConfig::Twophase(t) => (&mut t.members, &mut t.member),
        DeviceConfig::Scala(c) => (&mut c.members, &mut c.member),
        DeviceConfig::Stripe(s) => (&mut s.members, &mut s.member),
        DeviceConfig::Concat(c) => (&mut c.members, &mut c.member),
        DeviceConfig::Dmzoned(d) => {
            for m in d.members.iter_mut() {
                reduce_device(m, div)?;
            }
            return Ok(());
        }
        DeviceConfig::Wbcache(w) => {
            for m in w.members.iter_mut() {
                reduce_device(m, div)?;
            }
            return Ok(());
        }
        DeviceConfig::Zoned(z) => return reduce_device(&mut z.member, div),
        DeviceConfig::Inject(j) => return reduce_device(&mut j.member, div),
        DeviceConfig::Csal(c) => {
            for m in c.members.iter_mut() {
                reduce_device(m, div)?;
            }
            return Ok(());
        }
        DeviceConfig::Ram(_) | DeviceConfig::File(_) | DeviceConfig::Nbd(_) => return Ok(()),
    };
    for m in members.iter_mut() {
        reduce_device(m, div)?;
    }
    if let Some(m) = member {
        reduce_device(m, div)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduction_at_one_is_the_preset_and_gc_rule_reproduces_it() {
        let preset = SsdConfig::preset("scalaafa-femu").unwrap();
        let mut c = preset.clone();
        femu_gc_thresholds(&mut c).unwrap();
        assert_eq!(c.firmware.gc_foreground_free_lines, preset.firmware.gc_foreground_free_lines);
        assert_eq!(c.firmware.gc_background_free_lines, preset.firmware.gc_background_free_lines);
        for (b, p) in [Mode::Full.reduction(), Mode::Quick.reduction()] {
            let mut c = preset.clone();
            reduce_ssd(&mut c, (b, p)).unwrap();
            assert_eq!(c.geometry.blocks_per_plane as u64 * b, 352);
            assert_eq!(c.geometry.pages_per_block as u64 * p, 512);
            assert_eq!(c.firmware.slc_cache_bytes * b * p, 4 << 30);
            // What sets the bandwidth is untouched; the erase time per programmed page too.
            assert_eq!(c.nand.erase_ns * p, preset.nand.erase_ns);
            assert_eq!(c.nand.slc_erase_ns * p, preset.nand.slc_erase_ns);
            let (mut a, mut b) = (c.nand.clone(), preset.nand.clone());
            (a.erase_ns, a.slc_erase_ns, b.erase_ns, b.slc_erase_ns) = (0, 0, 0, 0);
            assert_eq!(a, b);
            assert_eq!(c.geometry.planes(), preset.geometry.planes());
        }
    }

    #[test]
    fn scaled_lengths() {
        assert_eq!(Mode::Full.scaled_runtime_ms(1000), 125);
        assert_eq!(Mode::Quick.scaled_runtime_ms(1000), 31);
        assert_eq!(Mode::Smoke.scaled_runtime_ms(1000), 1);
        assert_eq!(Mode::Full.scaled_requests(1000.0), 125);
        assert_eq!(Mode::Smoke.scaled_requests(1e6), 300);
    }
}
