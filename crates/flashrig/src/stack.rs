//! Building a device stack from its configuration.

use std::sync::Arc;

use flashrig_blockdev::{DevError, DevRef};
use flashrig_devices::{FileDevice, FileOptions, RamDevice};
use flashrig_engines::{Concat, Stripe};
use flashrig_ssd::Ssd;

use crate::config::DeviceConfig;
use crate::error::Error;

/// Builds the stack described by `cfg`. Layers without a configured name are named after their
/// type and position (`stripe`, `ram0`, `ram1`, ...).
pub fn build(cfg: &DeviceConfig) -> Result<DevRef, Error> {
    build_at(cfg, &default_name(cfg, None), "device")
}

fn default_name(cfg: &DeviceConfig, index: Option<usize>) -> String {
    let kind = match cfg {
        DeviceConfig::Ram(_) => "ram",
        DeviceConfig::File(_) => "file",
        DeviceConfig::Stripe(_) => "stripe",
        DeviceConfig::Concat(_) => "concat",
        DeviceConfig::Ssd(_) => "ssd",
    };
    match index {
        Some(i) => format!("{kind}{i}"),
        None => kind.to_string(),
    }
}

fn stack_err(at: &str, e: DevError) -> Error {
    Error::Stack(format!("{at}: {e}"))
}

fn build_at(cfg: &DeviceConfig, default: &str, at: &str) -> Result<DevRef, Error> {
    Ok(match cfg {
        DeviceConfig::Ram(r) => {
            let name = r.name.clone().unwrap_or_else(|| default.to_string());
            let blocks = r.capacity.bytes() / r.block_size as u64;
            Arc::new(RamDevice::new(&name, r.block_size, blocks, r.md_bytes, r.latency_ns))
        }
        DeviceConfig::File(f) => {
            let name = f.name.clone().unwrap_or_else(|| default.to_string());
            let opts = FileOptions {
                path: f.path.clone(),
                size_bytes: f.size.map(|s| s.bytes()),
                block_size: f.block_size,
                md_bytes_per_block: f.md_bytes,
                direct: f.direct,
                latency_ns: f.latency_ns,
                io: f.io,
            };
            Arc::new(FileDevice::open(&name, &opts).map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Stripe(s) => {
            let name = s.name.clone().unwrap_or_else(|| default.to_string());
            let members = build_members(&s.members, &s.member, s.width, at)?;
            let bs = members[0].info().block_size as u64;
            if s.chunk.bytes() % bs != 0 {
                return Err(Error::Stack(format!(
                    "{at}.chunk = {}: not a multiple of the members' {bs}-byte block",
                    s.chunk
                )));
            }
            Arc::new(
                Stripe::new(&name, members, s.chunk.bytes() / bs).map_err(|e| stack_err(at, e))?,
            )
        }
        DeviceConfig::Concat(c) => {
            let name = c.name.clone().unwrap_or_else(|| default.to_string());
            let members = build_members(&c.members, &c.member, c.width, at)?;
            Arc::new(Concat::new(&name, members).map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Ssd(spec) => {
            let name = spec.0.name.clone().unwrap_or_else(|| default.to_string());
            Arc::new(Ssd::new(&name, &spec.0).map_err(|e| Error::Stack(format!("{at}: {e}")))?)
        }
    })
}

fn build_members(
    members: &[DeviceConfig],
    member: &Option<Box<DeviceConfig>>,
    width: Option<usize>,
    at: &str,
) -> Result<Vec<DevRef>, Error> {
    let list: Vec<DeviceConfig> = match (member, width) {
        (Some(template), Some(w)) => {
            if let DeviceConfig::File(f) = template.as_ref() {
                if w > 1 && !f.path.to_string_lossy().contains("{i}") {
                    return Err(Error::Stack(format!(
                        "{at}.member.path = {}: with width {w} the path needs {{i}} so each \
                         member gets its own file",
                        f.path.display()
                    )));
                }
            }
            (0..w).map(|i| instantiate(template, i)).collect()
        }
        _ => members.to_vec(),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| build_at(m, &default_name(m, Some(i)), &format!("{at}.members[{i}]")))
        .collect()
}

/// A member template with `{i}` in file paths replaced by the member's index.
fn instantiate(template: &DeviceConfig, i: usize) -> DeviceConfig {
    let mut m = template.clone();
    if let DeviceConfig::File(f) = &mut m {
        let p = f.path.to_string_lossy().replace("{i}", &i.to_string());
        f.path = p.into();
    }
    m
}
