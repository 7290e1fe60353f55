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
    let value: f64 = num.parse().map_err(|_| format!("\"{s}\" is not a size"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
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
}
