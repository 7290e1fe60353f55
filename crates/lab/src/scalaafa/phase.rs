//! Which phase of a two-phase engine each run measures, and how a run is brought there.
//!
//! §6.5 compares ScalaAFA with Scala-CO and FusionRAID while conversion is active, and §3.1
//! measures FusionRAID in both phases (Fig. 3a replication, Fig. 3b conversion). A fresh array
//! at reduced scale stays in its replication phase for a whole microbenchmark (at 1/8 a 125 ms
//! ScalaAFA run writes about 1.3 GB while its vertical heroes run short only after about
//! 1.9 GB), so the runs that must measure conversion are preconditioned: the engine first
//! receives sequential writes (`precondition.write`, not measured) up to the point where its
//! conversion starts, then the measured window begins. The bytes come from the engine's own
//! rules, computed here from the configuration, never from a measured outcome:
//!
//! - **scala** converts in the foreground of its space manager once free vertical heroes fall
//!   below `vh_low_fraction` of all of them (§5.2 "heroes are running out"). Each member's
//!   transient area holds `vh_per_member` VHs of `k` chunks, and a user chunk leaves `m`
//!   backup copies in VHs, so the point is `(1 - vh_low_fraction) × n × vh_per_member × k ×
//!   chunk / m` user bytes.
//! - **twophase** converts once replicated data passes its watermark (5% of the capacity); it
//!   is preconditioned with 1.5 times the watermark so conversion is under way and writes are
//!   already waiting for room when the window starts.
//!
//! Past its conversion point a scala array still holds a reserve of free VHs, the space
//! manager's low mark: `vh_low_fraction × n × vh_per_member × k × chunk / m` user bytes that
//! can be written without waiting for a conversion. A short window is carried by that reserve:
//! an engine that converts slowly (Scala-CO, on the host) runs on it and looks as fast as one
//! that keeps up. Fig. 15 compares exactly those two, so its scala runs last as long as the
//! array would take, at its ideal rate, to write [`CONVERSION_WINDOW_RESERVES`] reserves
//! ([`conversion_window_ms`]); at that rate the reserve would last a tenth of the window, and
//! a run slower than the ideal writes fewer than ten reserves in it. The
//! ideal rate is the replication phase's: every member's NAND programming at its peak
//! (planes × page ÷ MLC program time), each user byte written m + 1 times.
//!
//! Whether a run really measured conversion is read back from its result file: the stripes
//! converted during the measured window (the layers' counters minus what they stood at when
//! preconditioning ended, see docs/formats.md), shown in the document's phase table.

use flashrig_engines::{ScalaOptions, TwophaseOptions};
use flashrig_frontends::config::{Config, DeviceConfig, ScalaConfig, TwophaseConfig};
use flashrig_frontends::report::Run;
use flashrig_frontends::size::Size;
use flashrig_ssd::SsdConfig;

use crate::core::results::window_counter;

/// FusionRAID's preconditioning, in watermarks: past the watermark, so conversion runs.
const TWOPHASE_PRECONDITION_WATERMARKS: f64 = 1.5;
/// How many of its reserves of free VHs a run that compares conversion paths (Fig. 15) has
/// time to write at the array's ideal rate (see the module comment).
const CONVERSION_WINDOW_RESERVES: f64 = 10.0;
/// The request size of every preconditioning: 64 KiB sequential writes, one chunk each.
const PRECONDITION_REQUEST_BYTES: u64 = 64 << 10;

/// The SSD every member of an array is, if they are all alike and emulated.
fn member_ssd(d: &DeviceConfig) -> Option<&SsdConfig> {
    let member = match d {
        DeviceConfig::Scala(c) => c.member.as_deref(),
        DeviceConfig::Twophase(t) => t.member.as_deref(),
        DeviceConfig::Raid(r) => r.member.as_deref(),
        _ => None,
    }?;
    match member {
        DeviceConfig::Ssd(s) => Some(&s.0),
        _ => None,
    }
}

/// A `scala` array's vertical heroes in user bytes: the backup room of all n transient areas,
/// divided by the m backups each user chunk leaves; `None` when its members are not emulated
/// SSDs with an SLC cache.
fn scala_vh_user_bytes(c: &ScalaConfig, ssd: &SsdConfig) -> Option<f64> {
    let chunk = c.chunk.bytes();
    let transient = match c.transient_kib_per_member {
        Some(kib) => kib * 1024,
        None => ssd.firmware.slc_cache_bytes,
    };
    let vh_per_member = transient / chunk / c.k as u64;
    if vh_per_member == 0 || c.m == 0 {
        return None;
    }
    let vh_bytes = (c.k + c.m) as f64 * vh_per_member as f64 * c.k as f64 * chunk as f64;
    Some(vh_bytes / c.m as f64)
}

fn vh_low_fraction(c: &ScalaConfig) -> f64 {
    c.vh_low_fraction.unwrap_or(ScalaOptions::new(c.k, c.m).vh_low_fraction)
}

/// The user bytes after which a `scala` array's vertical heroes run short (see the module
/// comment); `None` when its members are not emulated SSDs with an SLC cache.
pub(super) fn scala_conversion_bytes(c: &ScalaConfig, ssd: &SsdConfig) -> Option<u64> {
    let bytes = (1.0 - vh_low_fraction(c)) * scala_vh_user_bytes(c, ssd)?;
    Some(round_to_requests(bytes))
}

/// The user bytes a `scala` array past its conversion point can still write on free VHs.
fn scala_reserve_bytes(c: &ScalaConfig, ssd: &SsdConfig) -> Option<f64> {
    Some(vh_low_fraction(c) * scala_vh_user_bytes(c, ssd)?)
}

/// One SSD's peak MLC write rate: every plane programming a page at the mean MLC program
/// time (§6.1 configures FEMU's at 4,890 MB/s, docs/ssd.md).
fn member_write_bytes_per_s(ssd: &SsdConfig) -> Option<f64> {
    let program = &ssd.nand.program_ns;
    if program.is_empty() {
        return None;
    }
    let mean_ns = program.iter().map(|&p| p as f64).sum::<f64>() / program.len() as f64;
    let planes = ssd.geometry.planes() as f64;
    Some(planes * ssd.geometry.page_bytes as f64 / (mean_ns * 1e-9))
}

/// The measured window of a run that compares conversion paths: the time the `scala` array
/// of `cfg` takes to write [`CONVERSION_WINDOW_RESERVES`] reserves of free VHs at its ideal
/// rate, in whole milliseconds (rounded up). `None` for other devices.
pub(super) fn conversion_window_ms(cfg: &Config) -> Option<u64> {
    let ssd = member_ssd(&cfg.device)?;
    let DeviceConfig::Scala(c) = &cfg.device else { return None };
    let reserve = scala_reserve_bytes(c, ssd)?;
    let ideal = member_write_bytes_per_s(ssd)? * (c.k + c.m) as f64 / (c.m + 1) as f64;
    Some((CONVERSION_WINDOW_RESERVES * reserve / ideal * 1e3).ceil() as u64)
}

/// The user bytes that take a `twophase` array past its watermark (see the module comment).
fn twophase_conversion_bytes(t: &TwophaseConfig, ssd: &SsdConfig) -> Option<u64> {
    let layout = flashrig_ssd::media::Layout::new(ssd).ok()?;
    // The watermark is 5% of the array's capacity, k members' worth of rows (the log and
    // reserve rows it keeps back are a few rows, well within the margin above the watermark).
    let capacity = t.k as f64 * layout.capacity_bytes() as f64;
    let watermark = TwophaseOptions::new(t.k, t.m).watermark_fraction;
    Some(round_to_requests(TWOPHASE_PRECONDITION_WATERMARKS * watermark * capacity))
}

fn round_to_requests(bytes: f64) -> u64 {
    (bytes / PRECONDITION_REQUEST_BYTES as f64).round() as u64 * PRECONDITION_REQUEST_BYTES
}

fn precondition(cfg: &mut Config, bytes: u64) {
    cfg.precondition.write = Size(bytes);
    cfg.precondition.fill_bs = Size(PRECONDITION_REQUEST_BYTES);
    cfg.precondition.iodepth = 32;
}

/// Brings a microbenchmark of a two-phase array to its conversion phase (after the SSDs are
/// reduced). Returns the bytes written, or `None` when the engine has no conversion phase or
/// its members are not emulated SSDs.
pub(super) fn to_conversion_phase(cfg: &mut Config) -> Option<u64> {
    let ssd = member_ssd(&cfg.device)?.clone();
    let bytes = match &cfg.device {
        DeviceConfig::Scala(c) => scala_conversion_bytes(c, &ssd)?,
        DeviceConfig::Twophase(t) => twophase_conversion_bytes(t, &ssd)?,
        _ => return None,
    };
    precondition(cfg, bytes);
    Some(bytes)
}

/// One member SSD alone in the state a member of `array` is in after [`to_conversion_phase`]:
/// each of the n members received the user bytes times (m + 1) replicas over n.
pub(super) fn single_in_conversion_phase(one: &mut Config, array: &Config) -> Option<u64> {
    let (k, m) = match &array.device {
        DeviceConfig::Scala(c) => (c.k, c.m),
        DeviceConfig::Twophase(t) => (t.k, t.m),
        _ => return None,
    };
    let user = array.precondition.write.bytes();
    if user == 0 {
        return None;
    }
    let bytes = round_to_requests(user as f64 * (m + 1) as f64 / (k + m) as f64);
    precondition(one, bytes);
    Some(bytes)
}

/// What a run measured: the phase of its two-phase engine over the measured window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// No stripe was converted during the window.
    Replication,
    /// Stripes were converted during the window (this many).
    Conversion(u64),
}

impl Phase {
    pub(super) fn of(run: &Run) -> Option<Phase> {
        let converted = match run.result.layers.kind.as_str() {
            // Both conversion paths of the space manager.
            "scala" => {
                window_counter(run, "scala", "conversions_ssd")
                    + window_counter(run, "scala", "conversions_host")
            }
            "twophase" => window_counter(run, "twophase", "conversions"),
            _ => return None,
        };
        Some(if converted == 0 { Phase::Replication } else { Phase::Conversion(converted) })
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Phase::Replication => "replication",
            Phase::Conversion(_) => "conversion",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4+1 array of 64 KiB chunks of device type `kind` over `member` (inline TOML).
    fn scala_4_1(kind: &str, member: &str) -> Config {
        let text = format!(
            "[device]\ntype = \"{kind}\"\nk = 4\nm = 1\nchunk = \"64KiB\"\nmember = {member}\n"
        );
        Config::from_toml(&text, std::path::Path::new("test.toml")).unwrap()
    }

    /// At 1/8 a 4+1 ScalaAFA's members have 512 MiB SLC caches, 2,048 VHs of 4 chunks each;
    /// three quarters of the 5 × 2,048 VHs hold 1 backup per user chunk: 1.875 GiB.
    #[test]
    fn scala_conversion_point_at_one_eighth() {
        let mut ssd = SsdConfig::preset("scalaafa-femu").unwrap();
        crate::core::scale::reduce_ssd(&mut ssd, (1, 8)).unwrap();
        let cfg = scala_4_1("scala", r#"{ type = "ram", capacity = "1GiB" }"#);
        let DeviceConfig::Scala(c) = cfg.device else { panic!("a scala config") };
        let bytes = scala_conversion_bytes(&c, &ssd).unwrap();
        let vh = (512u64 << 20) / (64 << 10) / 4;
        assert_eq!(vh, 2048);
        assert_eq!(bytes, (0.75 * 5.0 * (vh * 4 * (64 << 10)) as f64) as u64);
    }

    /// The same array's reserve is the other quarter, 640 MiB; ten of them at 5/2 × 4.89 GB/s
    /// take 549 ms. A quarter of the SLC cache gives a window a quarter as long.
    #[test]
    fn conversion_window_at_one_eighth() {
        let femu = r#"{ type = "ssd", preset = "scalaafa-femu", payload = "none" }"#;
        let mut cfg = scala_4_1("scala", femu);
        crate::core::scale::reduce_device(&mut cfg.device, (1, 8)).unwrap();
        let DeviceConfig::Scala(c) = &cfg.device else { panic!("a scala config") };
        let ssd = member_ssd(&cfg.device).unwrap();
        assert_eq!(scala_reserve_bytes(c, ssd).unwrap(), (640u64 << 20) as f64);
        let rate = member_write_bytes_per_s(ssd).unwrap();
        assert!((rate / 1e6 - 4890.0).abs() < 1.0, "{rate}");
        assert_eq!(conversion_window_ms(&cfg), Some(549));
        if let DeviceConfig::Scala(c) = &mut cfg.device {
            c.transient_kib_per_member = Some(128 << 10);
        }
        assert_eq!(conversion_window_ms(&cfg), Some(138));
        // No window for an array that is not scala.
        let raid = scala_4_1("raid", femu);
        assert_eq!(conversion_window_ms(&raid), None);
    }
}
