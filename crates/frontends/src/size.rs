//! Byte sizes in configuration files: an integer (bytes) or a string with a binary unit
//! ("4KiB", "4k", "64M", "1GiB"). As in fio, K, M, G and T are powers of 1024 with or without
//! the "iB"/"B" suffix, so "4KB" is 4096 bytes; a bare number is bytes.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Size(pub u64);

impl Size {
    pub const fn kib(n: u64) -> Size {
        Size(n << 10)
    }
    pub const fn mib(n: u64) -> Size {
        Size(n << 20)
    }
    pub const fn gib(n: u64) -> Size {
        Size(n << 30)
    }
    pub fn bytes(self) -> u64 {
        self.0
    }
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "\"{s}\" is not a size (expected e.g. 4096, \"4KiB\", \"64M\", \"1GiB\")"
        ));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "\"{s}\": unknown size unit \"{other}\" (use B, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let too_large = || format!("\"{s}\" is too large: more than 2^64 - 1 bytes (16 EiB)");
    if !num.contains('.') {
        // Whole numbers exactly, in integers: a float would round the largest ones.
        let n: u64 = num.parse().map_err(|_| too_large())?;
        return n.checked_mul(1 << shift).ok_or_else(too_large);
    }
    let value: f64 = num.parse().map_err(|_| format!("\"{s}\" is not a size"))?;
    let bytes = value * (1u64 << shift) as f64;
    if bytes >= u64::MAX as f64 {
        return Err(too_large());
    }
    if bytes.fract() != 0.0 {
        return Err(format!("\"{s}\" is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats bytes with the largest binary unit that divides them exactly.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(self.0))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: bytes as an integer, or a string such as \"4KiB\" or \"1GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v).map(Size).map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A block-size mix (fio's `bssplit`): `"4k/50:64k/50"`, each size with the percentage of
/// requests that use it. As in fio, sizes with an empty percentage share what the others leave
/// (`"4k/30:8k/:16k/"` gives 35% each to 8k and 16k), and the percentages must sum to 100.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockSizeMix(pub Vec<(Size, u32)>);

impl BlockSizeMix {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn max_bytes(&self) -> Option<u64> {
        self.0.iter().map(|(s, _)| s.bytes()).max()
    }
    pub fn min_bytes(&self) -> Option<u64> {
        self.0.iter().map(|(s, _)| s.bytes()).min()
    }
    /// The size for a uniform draw `r` in `0..100`.
    pub fn pick(&self, r: u32) -> Size {
        let mut acc = 0;
        for &(s, p) in &self.0 {
            acc += p;
            if r < acc {
                return s;
            }
        }
        self.0.last().map(|&(s, _)| s).unwrap_or_default()
    }
}

impl std::str::FromStr for BlockSizeMix {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let mut given = Vec::new();
        let mut open = 0u32;
        for part in text.split(':').map(str::trim).filter(|p| !p.is_empty()) {
            let (size, pct) = part.split_once('/').ok_or_else(|| {
                format!("bssplit \"{text}\": \"{part}\" is not size/percent (e.g. 4k/50)")
            })?;
            let size = Size(parse_size(size).map_err(|e| format!("bssplit \"{text}\": {e}"))?);
            if size.bytes() == 0 {
                return Err(format!("bssplit \"{text}\": a block size must be positive"));
            }
            let pct = match pct.trim() {
                "" => {
                    open += 1;
                    None
                }
                p => Some(p.parse::<u32>().ok().filter(|&v| v <= 100).ok_or_else(|| {
                    format!("bssplit \"{text}\": \"{p}\" is not a percentage from 0 to 100")
                })?),
            };
            given.push((size, pct));
        }
        if given.is_empty() {
            return Err(format!("bssplit \"{text}\": no block sizes"));
        }
        let fixed: u32 = given.iter().filter_map(|&(_, p)| p).sum();
        if fixed > 100 || (open == 0 && fixed != 100) {
            return Err(format!("bssplit \"{text}\": percentages sum to {fixed}, not 100"));
        }
        // fio splits the remainder evenly over the open entries; the last takes the rounding.
        let share = (100 - fixed).checked_div(open).unwrap_or(0);
        let mut rest = (100 - fixed).checked_rem(open).unwrap_or(0);
        let mut mix = Vec::new();
        for (s, p) in given {
            let p = p.unwrap_or_else(|| {
                open -= 1;
                share + if open == 0 { std::mem::take(&mut rest) } else { 0 }
            });
            if p > 0 {
                mix.push((s, p));
            }
        }
        Ok(BlockSizeMix(mix))
    }
}

impl fmt::Display for BlockSizeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(s, p)| format!("{s}/{p}")).collect();
        f.write_str(&parts.join(":"))
    }
}

impl Serialize for BlockSizeMix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for BlockSizeMix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert!(parse_size("4 parsecs").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("0.5").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for v in [1, 512, 4096, 65536, 3 << 29, 1 << 40, 12345] {
            assert_eq!(parse_size(&format_size(v)).unwrap(), v);
        }
        assert_eq!(format_size(65536), "64KiB");
    }

    #[test]
    fn block_size_mix_follows_fio() {
        let m: BlockSizeMix = "4k/50:64k/50".parse().unwrap();
        assert_eq!(m.0, vec![(Size::kib(4), 50), (Size::kib(64), 50)]);
        assert_eq!(m.pick(0), Size::kib(4));
        assert_eq!(m.pick(49), Size::kib(4));
        assert_eq!(m.pick(50), Size::kib(64));
        assert_eq!(m.pick(99), Size::kib(64));
        let open: BlockSizeMix = "4k/30:8k/:16k/".parse().unwrap();
        assert_eq!(open.0, vec![(Size::kib(4), 30), (Size::kib(8), 35), (Size::kib(16), 35)]);
        let odd: BlockSizeMix = "4k/:8k/:16k/".parse().unwrap();
        assert_eq!(odd.0.iter().map(|&(_, p)| p).sum::<u32>(), 100);
        assert_eq!(open.to_string().parse::<BlockSizeMix>().unwrap(), open);
        assert!("4k/50:8k/40".parse::<BlockSizeMix>().unwrap_err().contains("sum to 90"));
        assert!("4k/150".parse::<BlockSizeMix>().unwrap_err().contains("percentage"));
        assert!("4k".parse::<BlockSizeMix>().unwrap_err().contains("size/percent"));
        assert!("4q/100".parse::<BlockSizeMix>().unwrap_err().contains("unit"));
        assert!("".parse::<BlockSizeMix>().is_err());
    }
}
