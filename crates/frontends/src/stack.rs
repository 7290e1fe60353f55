//! Building a device stack from its configuration.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use flashrig_blockdev::DevRef;
use flashrig_devices::{FileDevice, FileOptions, NbdDevice, NbdOptions, NbdUri, RamDevice};
use flashrig_engines::csal::RecoveryMode;
use flashrig_engines::inject::{Inject, InjectionLog};
use flashrig_engines::raid::WriteMode;
use flashrig_engines::scala::{ConversionMode, Scala, ScalaOptions};
use flashrig_engines::{
    Concat, Csal, CsalOptions, Dmzoned, DmzonedOptions, Raid, RaidOptions, Stripe, Twophase,
    TwophaseOptions, Wbcache, WbcacheOptions, Zoned, ZonedOptions,
};
use flashrig_runtime::cost::SharedLockModel;
use flashrig_runtime::HostCosts;
use flashrig_ssd::Ssd;

use crate::config::{
    DeviceConfig, RaidMode, ScalaConfig, ScalaConversion, ScalaStart, TwophaseStart,
};
use crate::error::Error;
use crate::size::Size;

/// Builds the stack described by `cfg`. Layers without a configured name are named after their
/// type and position (`stripe`, `ram0`, `ram1`, ...).
///
/// Building is asynchronous because some engines read their members to start (a two-phase
/// array recovering its mapping, or trimming its members for a fresh start).
pub async fn build(cfg: &DeviceConfig) -> Result<DevRef, Error> {
    build_at(cfg, &default_name(cfg, None), "device").await
}

thread_local! {
    /// The `inject` layers built on this thread since [`build_with_fault_layers`] began.
    static FAULT_LAYERS: std::cell::RefCell<Vec<Arc<Inject>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Builds the stack as [`build`] does, and returns with it its `inject` layers, top first, so
/// that a server can arm and disarm their faults while it runs (crate::faultctl). A stack is
/// built by one task on one reactor, so the layers are collected on that thread.
pub async fn build_with_fault_layers(
    cfg: &DeviceConfig,
) -> Result<(DevRef, Vec<Arc<Inject>>), Error> {
    FAULT_LAYERS.with(|l| l.borrow_mut().clear());
    let dev = build(cfg).await;
    let layers = FAULT_LAYERS.with(|l| std::mem::take(&mut *l.borrow_mut()));
    Ok((dev?, layers))
}

type Building<'a> = Pin<Box<dyn Future<Output = Result<DevRef, Error>> + 'a>>;

fn default_name(cfg: &DeviceConfig, index: Option<usize>) -> String {
    let kind = match cfg {
        DeviceConfig::Ram(_) => "ram",
        DeviceConfig::File(_) => "file",
        DeviceConfig::Stripe(_) => "stripe",
        DeviceConfig::Concat(_) => "concat",
        DeviceConfig::Ssd(_) => "ssd",
        DeviceConfig::Raid(_) => "raid",
        DeviceConfig::Twophase(_) => "twophase",
        DeviceConfig::Scala(_) => "scala",
        DeviceConfig::Nbd(_) => "nbd",
        DeviceConfig::Wbcache(_) => "wbcache",
        DeviceConfig::Dmzoned(_) => "dmzoned",
        DeviceConfig::Zoned(_) => "zoned",
        DeviceConfig::Csal(_) => "csal",
        DeviceConfig::Inject(_) => "inject",
    };
    match index {
        Some(i) => format!("{kind}{i}"),
        None => kind.to_string(),
    }
}

fn stack_err(at: &str, e: impl std::fmt::Display) -> Error {
    Error::Stack(format!("{at}: {e}"))
}

// Engines hold members, so building recurses; a boxed future makes the recursion finite.
fn build_at<'a>(cfg: &'a DeviceConfig, default: &'a str, at: &'a str) -> Building<'a> {
    Box::pin(build_layer(cfg, default, at))
}

async fn build_layer(cfg: &DeviceConfig, default: &str, at: &str) -> Result<DevRef, Error> {
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
            let members = build_members(&s.members, &s.member, s.width, at).await?;
            let bs = members[0].info().block_size as u64;
            if s.chunk.bytes() % bs != 0 {
                return Err(Error::Stack(format!(
                    "{at}.chunk = {}: not a multiple of the members' {bs}-byte block",
                    s.chunk
                )));
            }
            check_chunk_fits(&members, s.chunk, bs, at)?;
            Arc::new(
                Stripe::new(&name, members, s.chunk.bytes() / bs).map_err(|e| stack_err(at, e))?,
            )
        }
        DeviceConfig::Dmzoned(d) => {
            let name = d.name.clone().unwrap_or_else(|| default.to_string());
            if d.members.len() != 2 {
                return Err(Error::Stack(format!(
                    "{at}.members: dmzoned needs exactly 2 members (fast, zoned), got {}",
                    d.members.len()
                )));
            }
            let members = build_members(&d.members, &None, None, at).await?;
            if members[1].info().zones.is_none() {
                return Err(Error::Stack(format!(
                    "{at}.members[1]: dmzoned's second member must be zoned (type = \"zoned\" \
                     or a zoned ssd), {} is not",
                    members[1].info().name
                )));
            }
            let opts = DmzonedOptions {
                idle_period_ns: d.idle_period_ms * 1_000_000,
                reserved_seq_zones: d.reserved_seq_zones,
            };
            Arc::new(Dmzoned::new(&name, members, opts).map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Wbcache(w) => {
            let name = w.name.clone().unwrap_or_else(|| default.to_string());
            if w.members.len() != 2 {
                return Err(Error::Stack(format!(
                    "{at}.members: wbcache needs exactly 2 members (cache, core), got {}",
                    w.members.len()
                )));
            }
            let members = build_members(&w.members, &None, None, at).await?;
            let bs = members[0].info().block_size as u64;
            if w.line.bytes() % bs != 0 {
                return Err(Error::Stack(format!(
                    "{at}.line = {}: not a multiple of the members' {bs}-byte block",
                    w.line
                )));
            }
            let opts = WbcacheOptions {
                line_bytes: w.line.bytes(),
                cleaning: w.cleaning,
                wake_up_ns: w.wake_up_s * 1_000_000_000,
                staleness_ns: w.staleness_time_s * 1_000_000_000,
                flush_max_buffers: w.flush_max_buffers,
                activity_threshold_ns: w.activity_threshold_ms * 1_000_000,
                seq_cutoff_policy: w.seq_cutoff_policy,
                seq_cutoff_threshold_bytes: w.seq_cutoff_threshold.bytes(),
                ..WbcacheOptions::default()
            };
            Arc::new(Wbcache::new(&name, members, opts).map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Concat(c) => {
            let name = c.name.clone().unwrap_or_else(|| default.to_string());
            let members = build_members(&c.members, &c.member, c.width, at).await?;
            Arc::new(Concat::new(&name, members).map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Raid(r) => {
            let name = r.name.clone().unwrap_or_else(|| default.to_string());
            let width = r.member.as_ref().map(|_| r.width.unwrap_or(r.k + r.m));
            let members = build_members(&r.members, &r.member, width, at).await?;
            let bs = members[0].info().block_size as u64;
            if r.chunk.bytes() % bs != 0 {
                return Err(Error::Stack(format!(
                    "{at}.chunk = {}: not a multiple of the members' {bs}-byte block",
                    r.chunk
                )));
            }
            check_chunk_fits(&members, r.chunk, bs, at)?;
            let costs = HostCosts::named(&r.host)
                .ok_or_else(|| Error::Stack(format!("{at}.host = {}: unknown", r.host)))?;
            let opt = RaidOptions {
                k: r.k,
                m: r.m,
                chunk_blocks: r.chunk.bytes() / bs,
                write_mode: match r.mode {
                    RaidMode::Any => WriteMode::Any,
                    RaidMode::FullStripe => WriteMode::FullStripeOnly,
                },
                cache_stripes: r.stripe_cache,
                costs: Arc::new(costs),
                // The kernel profile models md, whose stripes pass an array-wide lock.
                lock_model: (r.host == "kernel").then(|| Arc::new(SharedLockModel::new())),
            };
            Arc::new(Raid::new(&name, members, opt).map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Twophase(t) => {
            let name = t.name.clone().unwrap_or_else(|| default.to_string());
            let width = t.member.as_ref().map(|_| t.width.unwrap_or(t.k + t.m));
            let members = build_members(&t.members, &t.member, width, at).await?;
            let bs = members[0].info().block_size as u64;
            if t.chunk.bytes() % bs != 0 {
                return Err(Error::Stack(format!(
                    "{at}.chunk = {}: not a multiple of the members' {bs}-byte block",
                    t.chunk
                )));
            }
            check_chunk_fits(&members, t.chunk, bs, at)?;
            let costs = HostCosts::named(&t.host)
                .ok_or_else(|| Error::Stack(format!("{at}.host = {}: unknown", t.host)))?;
            let mut opts = TwophaseOptions::new(t.k, t.m);
            opts.chunk_blocks = t.chunk.bytes() / bs;
            opts.watermark_fraction = t.watermark;
            opts.low_watermark_fraction = t.low_watermark.unwrap_or(t.watermark / 2.0);
            opts.convert_workers = t.convert_workers;
            opts.costs = Arc::new(costs);
            // The kernel profile models FusionRAID, a lock-based kernel engine.
            opts.lock = (t.host == "kernel").then(|| Arc::new(SharedLockModel::new()));
            let eng = match t.start {
                TwophaseStart::New => Twophase::new(&name, members, opts),
                TwophaseStart::Create => Twophase::create(&name, members, opts).await,
                TwophaseStart::Recover | TwophaseStart::Auto => {
                    Twophase::open(&name, members, opts).await
                }
            };
            Arc::new(eng.map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Scala(c) => {
            let name = c.name.clone().unwrap_or_else(|| default.to_string());
            let width = c.member.as_ref().map(|_| c.width.unwrap_or(c.k + c.m));
            let members = build_members(&c.members, &c.member, width, at).await?;
            let opts = scala_options(c, &members, width, at)?;
            let eng = match c.start {
                ScalaStart::Create => Scala::create(&name, members, opts).await,
                ScalaStart::Recover => Scala::open(&name, members, opts).await,
                ScalaStart::Auto => Scala::open_or_create(&name, members, opts).await,
            };
            Arc::new(eng.map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Ssd(spec) => {
            let name = spec.0.name.clone().unwrap_or_else(|| default.to_string());
            Arc::new(Ssd::new(&name, &spec.0).map_err(|e| Error::Stack(format!("{at}: {e}")))?)
        }
        DeviceConfig::Inject(j) => {
            let name = j.name.clone().unwrap_or_else(|| default.to_string());
            let member =
                build_at(&j.member, &default_name(&j.member, Some(0)), &format!("{at}.member"))
                    .await?;
            let bs = member.info().block_size;
            let mut faults = Vec::with_capacity(j.faults.len());
            for (i, f) in j.faults.iter().enumerate() {
                faults.push(f.to_spec(bs).map_err(|e| stack_err(&format!("{at}.faults[{i}]"), e))?);
            }
            let log = match &j.log {
                Some(path) => InjectionLog::to_file(path).map_err(|e| {
                    stack_err(&format!("{at}.log"), format!("{}: {e}", path.display()))
                })?,
                None => InjectionLog::in_memory(),
            };
            let classifier = match &j.filesystem {
                Some(fs) => Some(
                    flashrig_engines::inject::structure::classifier(fs, bs)
                        .map_err(|e| stack_err(&format!("{at}.filesystem"), e))?,
                ),
                None => None,
            };
            let layer = Arc::new(
                Inject::new(&name, member, faults, j.seed, log, classifier)
                    .map_err(|e| stack_err(at, e))?,
            );
            // What the member already holds (an image made beforehand) is classified now, so
            // that a fault can target it before the file system above reads it.
            layer.scan().await.map_err(|e| stack_err(at, format!("scanning the member: {e}")))?;
            FAULT_LAYERS.with(|l| l.borrow_mut().push(layer.clone()));
            layer
        }
        DeviceConfig::Zoned(z) => {
            let name = z.name.clone().unwrap_or_else(|| default.to_string());
            let member =
                build_at(&z.member, &default_name(&z.member, Some(0)), &format!("{at}.member"))
                    .await?;
            let bs = member.info().block_size as u64;
            let cap = z.zone_capacity.unwrap_or(z.zone);
            for (key, size) in [("zone", z.zone), ("zone_capacity", cap)] {
                if !size.bytes().is_multiple_of(bs) {
                    return Err(Error::Stack(format!(
                        "{at}.{key} = {size}: not a multiple of the member's {bs}-byte block"
                    )));
                }
            }
            let opts = ZonedOptions {
                zone_blocks: z.zone.bytes() / bs,
                zone_capacity_blocks: cap.bytes() / bs,
                max_open_zones: z.max_open_zones,
                max_active_zones: z.max_active_zones,
            };
            Arc::new(
                Zoned::open_or_create(&name, member, opts).await.map_err(|e| stack_err(at, e))?,
            )
        }
        DeviceConfig::Csal(c) => {
            let name = c.name.clone().unwrap_or_else(|| default.to_string());
            let members = build_members(&c.members, &None, None, at).await?;
            if members.len() != 2 {
                return Err(Error::Stack(format!(
                    "{at}.members: csal takes exactly 2 members, [fast, zoned]; got {}",
                    members.len()
                )));
            }
            if members[1].info().zones.is_none() {
                return Err(Error::Stack(format!(
                    "{at}.members[1] ({}): csal's second member must be zoned (an SSD's zoned \
                     namespace, or a `type = \"zoned\"` layer over a block device)",
                    members[1].info().name
                )));
            }
            let bs = members[0].info().block_size as u64;
            for (key, size) in
                [("batch", Some(c.batch)), ("chunk", c.chunk), ("l2p_cache", Some(c.l2p_cache))]
            {
                if let Some(size) = size {
                    if size.bytes() == 0 || !size.bytes().is_multiple_of(bs) {
                        return Err(Error::Stack(format!(
                            "{at}.{key} = {size}: not a positive multiple of the fast member's \
                             {bs}-byte block"
                        )));
                    }
                }
            }
            let opts = CsalOptions {
                chunk_blocks: c.chunk.map(|s| s.bytes() / bs),
                l2p_cache_pages: (c.l2p_cache.bytes() / 4096).max(1) as usize,
                tenants: c.tenants,
                compaction_free_fraction: c.compaction_free_fraction,
                batch_blocks: c.batch.bytes() / bs,
                gc_free_zones: c.gc_free_zones,
                over_provisioning_fraction: c.over_provisioning,
                gc_isolation: c.gc_isolation,
                user_isolation: c.user_isolation,
                recovery: RecoveryMode::parse(&c.recovery).ok_or_else(|| {
                    Error::Stack(format!("{at}.recovery = \"{}\": unknown mode", c.recovery))
                })?,
                internal_reactor: c.internal_reactor,
            };
            let (fast, zoned) = (members[0].clone(), members[1].clone());
            let eng = match c.start {
                ScalaStart::Create => Csal::create(&name, fast, zoned, opts).await,
                ScalaStart::Recover => Csal::open(&name, fast, zoned, opts).await,
                ScalaStart::Auto => Csal::open_or_create(&name, fast, zoned, opts).await,
            };
            Arc::new(eng.map_err(|e| stack_err(at, e))?)
        }
        DeviceConfig::Nbd(n) => {
            let name = n.name.clone().unwrap_or_else(|| default.to_string());
            let uri = NbdUri::parse(&n.uri)
                .map_err(|e| Error::Stack(format!("{at}.uri = \"{}\": {e}", n.uri)))?;
            let opts = NbdOptions { uri, block_size: n.block_size, connections: n.connections };
            // The server is reached now: an unreachable member is a stack error that names
            // the member and the URI, before any workload starts.
            Arc::new(NbdDevice::open(&name, opts).await.map_err(|e| stack_err(at, e))?)
        }
    })
}

/// Every member must hold at least one chunk (of `block_bytes` blocks); the error names the
/// first that does not, with both sizes in blocks, before an engine refuses the geometry.
fn check_chunk_fits(
    members: &[DevRef],
    chunk: Size,
    block_bytes: u64,
    at: &str,
) -> Result<(), Error> {
    let chunk_blocks = chunk.bytes() / block_bytes;
    for (i, m) in members.iter().enumerate() {
        let info = m.info();
        if info.num_blocks < chunk_blocks {
            return Err(Error::Stack(format!(
                "{at}.chunk = {chunk} ({chunk_blocks} blocks) is larger than member \
                 {at}.members[{i}] `{}` ({} blocks of {} bytes)",
                info.name, info.num_blocks, info.block_size
            )));
        }
    }
    Ok(())
}

/// The engine options of a `scala` array over its built `members`.
fn scala_options(
    c: &ScalaConfig,
    members: &[DevRef],
    width: Option<usize>,
    at: &str,
) -> Result<ScalaOptions, Error> {
    let bs = members[0].info().block_size as u64;
    if !c.chunk.bytes().is_multiple_of(bs) {
        return Err(Error::Stack(format!(
            "{at}.chunk = {}: not a multiple of the members' {bs}-byte block",
            c.chunk
        )));
    }
    check_chunk_fits(members, c.chunk, bs, at)?;
    let costs = HostCosts::named(&c.host)
        .ok_or_else(|| Error::Stack(format!("{at}.host = {}: unknown", c.host)))?;
    let mut opts = ScalaOptions::new(c.k, c.m);
    opts.chunk_blocks = c.chunk.bytes() / bs;
    opts.conversion = match c.conversion {
        ScalaConversion::Auto => ConversionMode::Auto,
        ScalaConversion::Ssd => ConversionMode::Ssd,
        ScalaConversion::Host => ConversionMode::Host,
    };
    opts.transient_tags = c.transient_tags;
    let transient_bytes = match c.transient_kib_per_member {
        Some(kib) => Some(kib * 1024),
        None => slc_cache_bytes(c, width),
    };
    if let Some(bytes) = transient_bytes {
        if !bytes.is_multiple_of(bs) {
            return Err(Error::Stack(format!(
                "{at}.transient_kib_per_member: {bytes} bytes is not a multiple of the \
                 members' {bs}-byte block"
            )));
        }
        opts.transient_blocks_per_member = Some(bytes / bs);
    }
    opts.grant_heroes = c.grant_heroes;
    opts.convert_depth = c.convert_depth;
    if let Some(f) = c.vh_low_fraction {
        opts.vh_low_fraction = f;
    }
    if let Some(us) = c.idle_us {
        opts.idle_ns = us.saturating_mul(1000);
    }
    opts.space_manager_reactor = c.space_manager_reactor;
    opts.costs = Arc::new(costs);
    Ok(opts)
}

/// The transient area ScalaAFA sizes by the SLC buffers (§5.1): when every member of a
/// `scala` array is an emulated SSD with an SLC cache, the smallest member's cache size.
pub fn slc_cache_bytes(c: &ScalaConfig, width: Option<usize>) -> Option<u64> {
    let list: Vec<&DeviceConfig> = match (&c.member, width) {
        (Some(m), Some(w)) if w > 0 => vec![m.as_ref(); w],
        _ => c.members.iter().collect(),
    };
    let sizes: Option<Vec<u64>> = list
        .iter()
        .map(|d| match d {
            DeviceConfig::Ssd(s) if s.0.firmware.slc_cache_bytes > 0 => {
                Some(s.0.firmware.slc_cache_bytes)
            }
            _ => None,
        })
        .collect();
    sizes.and_then(|v| v.into_iter().min())
}

async fn build_members(
    members: &[DeviceConfig],
    member: &Option<Box<DeviceConfig>>,
    width: Option<usize>,
    at: &str,
) -> Result<Vec<DevRef>, Error> {
    let list: Vec<DeviceConfig> = match (member, width) {
        (Some(template), Some(w)) => {
            let shared_path = match template.as_ref() {
                DeviceConfig::File(f) => Some(("path", &f.path)),
                DeviceConfig::Ssd(s) => s.0.backing.as_ref().map(|p| ("backing", p)),
                _ => None,
            };
            if let Some((key, path)) = shared_path {
                if w > 1 && !path.to_string_lossy().contains("{i}") {
                    return Err(Error::Stack(format!(
                        "{at}.member.{key} = {}: with width {w} the path needs {{i}} so each \
                         member gets its own file",
                        path.display()
                    )));
                }
            }
            if let DeviceConfig::Nbd(n) = template.as_ref() {
                if w > 1 && !n.uri.contains("{i}") {
                    return Err(Error::Stack(format!(
                        "{at}.member.uri = \"{}\": with width {w} the URI needs {{i}} so each \
                         member gets its own export (as in nbd://host:1080{{i}}/)",
                        n.uri
                    )));
                }
            }
            (0..w).map(|i| instantiate(template, i)).collect()
        }
        _ => members.to_vec(),
    };
    let mut built = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        built.push(build_at(m, &default_name(m, Some(i)), &format!("{at}.members[{i}]")).await?);
    }
    Ok(built)
}

/// A member template with `{i}` in file paths and NBD URIs replaced by the member's index.
fn instantiate(template: &DeviceConfig, i: usize) -> DeviceConfig {
    let mut m = template.clone();
    let path = match &mut m {
        DeviceConfig::File(f) => Some(&mut f.path),
        DeviceConfig::Ssd(s) => s.0.backing.as_mut(),
        _ => None,
    };
    if let Some(path) = path {
        *path = path.to_string_lossy().replace("{i}", &i.to_string()).into();
    }
    if let DeviceConfig::Nbd(n) = &mut m {
        n.uri = n.uri.replace("{i}", &i.to_string());
    }
    m
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn scala(device: &str) -> ScalaConfig {
        let text = format!("[device]\ntype = \"scala\"\nk = 2\nm = 1\n{device}");
        match Config::from_toml(&text, Path::new("t.toml")).unwrap().device {
            DeviceConfig::Scala(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_transient_area_follows_the_members_slc_caches() {
        // Every member an SSD with an SLC cache: its size (tiny-slc: 4 MiB).
        let c = scala("member = { type = \"ssd\", preset = \"tiny-slc\" }\n");
        assert_eq!(slc_cache_bytes(&c, Some(3)), Some(4 << 20));
        // Different caches: the smallest.
        let c = scala(
            "members = [{ type = \"ssd\", preset = \"tiny-slc\" }, \
             { type = \"ssd\", preset = \"tiny-slc\", firmware = { slc_cache_bytes = 2097152 } }, \
             { type = \"ssd\", preset = \"tiny-slc\" }]\n",
        );
        assert_eq!(slc_cache_bytes(&c, None), Some(2 << 20));
        // A member without an SLC cache, or not an SSD: the engine's default.
        let c = scala(
            "members = [{ type = \"ssd\", preset = \"tiny-slc\" }, \
             { type = \"ssd\", preset = \"tiny\" }, { type = \"ssd\", preset = \"tiny-slc\" }]\n",
        );
        assert_eq!(slc_cache_bytes(&c, None), None);
        let c = scala("member = { type = \"ram\", capacity = \"64MiB\" }\n");
        assert_eq!(slc_cache_bytes(&c, Some(3)), None);
    }

    fn build_err(device: &str) -> String {
        match build_toml(device) {
            Ok(dev) => panic!("{} built", dev.info().name),
            Err(e) => e,
        }
    }

    fn build_toml(device: &str) -> Result<DevRef, String> {
        let text = format!("[device]\n{device}");
        let cfg = Config::from_toml(&text, Path::new("t.toml")).map_err(|e| e.to_string())?;
        let (res, _) =
            flashrig_runtime::run(flashrig_runtime::RuntimeKind::Sim, 1, || async move {
                let dev = build(&cfg.device).await.map_err(|e| e.to_string())?;
                // A write and a read back through the built stack.
                let data = vec![7u8; 8192];
                dev.write(3, &data, None, flashrig_blockdev::WriteHints::NONE)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut back = vec![0u8; 8192];
                dev.read(3, &mut back, None).await.map_err(|e| e.to_string())?;
                assert_eq!(back, data);
                Ok::<_, String>(dev)
            });
        res
    }

    #[test]
    fn baselines_build_from_toml_with_defaults_and_name_bad_keys() {
        let dev = build_toml(
            "type = \"wbcache\"\nmembers = [{ type = \"ram\", capacity = \"1MiB\" }, \
             { type = \"ram\", capacity = \"16MiB\" }]\n",
        )
        .unwrap();
        assert_eq!(
            (dev.kind(), dev.info().num_blocks, dev.info().optimal_io_blocks),
            ("wbcache", 4096, 16)
        );
        let dev = build_toml(
            "type = \"dmzoned\"\nmembers = [{ type = \"ram\", capacity = \"4MiB\" }, \
             { type = \"zoned\", zone = \"1MiB\", max_active_zones = 4, \
             member = { type = \"ram\", capacity = \"17MiB\" } }]\n",
        )
        .unwrap();
        // 16 sequential zones (the table takes the rest of the 17th MiB), one reserved.
        assert_eq!((dev.kind(), dev.info().num_blocks), ("dmzoned", 15 * 256));

        let err =
            build_err("type = \"wbcache\"\nmembers = [{ type = \"ram\", capacity = \"1MiB\" }]\n");
        assert!(err.contains("device.members") && err.contains("exactly 2"), "{err}");
        let err = build_err(
            "type = \"wbcache\"\nline = \"128KiB\"\nmembers = [{ type = \"ram\", capacity = \
             \"1MiB\" }, { type = \"ram\", capacity = \"16MiB\" }]\n",
        );
        assert!(err.contains("device.line = 128KiB"), "{err}");
        let err = build_err(
            "type = \"wbcache\"\nstaleness_time_s = 0\nmembers = [{ type = \"ram\", capacity = \
             \"1MiB\" }, { type = \"ram\", capacity = \"16MiB\" }]\n",
        );
        assert!(err.contains("device.staleness_time_s = 0"), "{err}");
        let err = build_err(
            "type = \"dmzoned\"\nmembers = [{ type = \"ram\", capacity = \"4MiB\" }, \
             { type = \"ram\", capacity = \"16MiB\" }]\n",
        );
        assert!(err.contains("device.members[1]") && err.contains("zoned"), "{err}");
        // Unknown keys and bad values are reported at the key, not as an unknown device type.
        let err = build_err(
            "type = \"wbcache\"\nlines = \"64KiB\"\nmembers = [{ type = \"ram\", capacity = \
             \"1MiB\" }, { type = \"ram\", capacity = \"16MiB\" }]\n",
        );
        assert!(err.contains("device.lines") && err.contains("unknown field"), "{err}");
        let err = build_err(
            "type = \"wbcache\"\nseq_cutoff_policy = \"sometimes\"\nmembers = [{ type = \
             \"ram\", capacity = \"1MiB\" }, { type = \"ram\", capacity = \"16MiB\" }]\n",
        );
        assert!(err.contains("device.seq_cutoff_policy") && err.contains("sometimes"), "{err}");
        let err = build_err(
            "type = \"dmzoned\"\nreserved_seq_zones = 0\nmembers = [{ type = \"ram\", capacity = \
             \"4MiB\" }, { type = \"zoned\", zone = \"1MiB\", member = { type = \"ram\", \
             capacity = \"17MiB\" } }]\n",
        );
        assert!(err.contains("device.reserved_seq_zones"), "{err}");
    }
}
