//! Goal: trace replay honours what it promises: open loop issues each request at its trace
//! timestamp (scaled by `speed`) however many are in flight, closed loop keeps exactly
//! `iodepth` in flight, addresses map onto the stack, `precondition.trace_reads` writes what
//! the trace reads (SSDSim's `pre_process_page`) and nothing else, and the real trace slices in
//! `../shared/traces` replay end to end through the CLI.
//!
//! Method: a hand-made DiskSim trace with known timestamps drives a recording device (over a
//! RAM disk with a fixed latency) on the simulated runtime, which logs the virtual time of
//! every submission and the largest number of commands in flight.

use std::sync::Arc;

use async_trait::async_trait;
use flashrig::replay::{replay, ReplayConfig, ReplayMode};
use flashrig_blockdev::{BlockDevice, DevRef, DevResult, DeviceInfo, WriteHints};
use flashrig_devices::RamDevice;
use flashrig_runtime::{now_ns, run, RuntimeKind};
use parking_lot::Mutex;

/// Logs submission times and tracks concurrency.
struct Recorder {
    inner: DevRef,
    log: Mutex<(Vec<u64>, u64, u64)>,
}

impl Recorder {
    fn begin(&self) {
        let mut l = self.log.lock();
        l.0.push(now_ns());
        l.1 += 1;
        l.2 = l.2.max(l.1);
    }
    fn end(&self) {
        self.log.lock().1 -= 1;
    }
}

#[async_trait(?Send)]
impl BlockDevice for Recorder {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn kind(&self) -> &'static str {
        "recorder"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.begin();
        let r = self.inner.read(lba, buf, md).await;
        self.end();
        r
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        self.begin();
        let r = self.inner.write(lba, d, md, h).await;
        self.end();
        r
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        self.inner.trim(lba, n).await
    }
}

/// A DiskSim trace (time in ns, devno, sector, sectors, 0 = write / 1 = read) of `n`
/// requests, one every `gap_ns`.
fn disksim_trace(dir: &std::path::Path, n: u64, gap_ns: u64) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!("{} 0 {} 8 {}\n", i * gap_ns, i * 512, i % 2));
    }
    let p = dir.join("t.disksim");
    std::fs::write(&p, text).unwrap();
    p
}

fn replay_recorded(cfg: ReplayConfig, latency_ns: u64) -> (Vec<u64>, u64, u64) {
    let (out, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ram: DevRef = Arc::new(RamDevice::new("ram", 4096, 1024, 0, latency_ns));
        let rec = Arc::new(Recorder { inner: ram, log: Mutex::new((Vec::new(), 0, 0)) });
        let dev: DevRef = rec.clone();
        let (o, c) = replay(dev, cfg).await.expect("replay");
        assert_eq!(o.errors, 0);
        assert_eq!(o.reads + o.writes, c.requests);
        let l = rec.log.lock();
        (l.0.clone(), l.2, c.wrapped)
    });
    out
}

#[test]
fn open_loop_issues_at_trace_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let trace = disksim_trace(dir.path(), 200, 10_000);
    // Each request takes 35 us, longer than the 10 us gap: requests pile up in flight, and
    // still each is issued exactly at its (scaled) timestamp.
    for speed in [1.0, 2.5] {
        let cfg = ReplayConfig {
            trace: trace.clone(),
            format: Some("disksim".into()),
            mode: ReplayMode::Open,
            speed,
            ..ReplayConfig::default()
        };
        let (times, max_in_flight, wrapped) = replay_recorded(cfg, 35_000);
        assert_eq!(times.len(), 200);
        for (i, t) in times.iter().enumerate() {
            assert_eq!(*t, (i as f64 * 10_000.0 / speed) as u64, "request {i} at speed {speed}");
        }
        assert!(max_in_flight >= 3, "open loop never overlapped requests: {max_in_flight}");
        // Request i starts at sector 512 i (256 KiB apart): past 4 MiB they wrap.
        assert!(wrapped > 0);
    }
}

#[test]
fn closed_loop_keeps_iodepth_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let trace = disksim_trace(dir.path(), 300, 1_000_000);
    for qd in [1u32, 4, 16] {
        let cfg = ReplayConfig {
            trace: trace.clone(),
            mode: ReplayMode::Closed,
            iodepth: qd,
            ..ReplayConfig::default()
        };
        let (times, max_in_flight, _) = replay_recorded(cfg, 50_000);
        assert_eq!(times.len(), 300);
        assert_eq!(max_in_flight, qd as u64);
        // Timestamps are ignored: 300 requests at 50 us and depth qd take 300 / qd rounds.
        assert_eq!(
            *times.last().unwrap(),
            (300 / qd as u64 - 1) * 50_000 + if 300 % qd as u64 == 0 { 0 } else { 50_000 }
        );
    }
}

#[test]
fn real_trace_slices_replay_through_the_cli() {
    let root = std::path::Path::new("/work/shared/traces");
    if !root.exists() {
        eprintln!("skipped: {} is not on this machine", root.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (file, requests) in [("mqsim/tpcc-small.trace", 6999), ("msr/hm_0_first899.csv", 899)] {
        let cfg = dir.path().join("replay.toml");
        std::fs::write(
            &cfg,
            format!(
                "runtime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"tiny\"\n\
                 [replay]\ntrace = \"{}\"\nmode = \"closed\"\niodepth = 16\n",
                root.join(file).display()
            ),
        )
        .unwrap();
        let json = dir.path().join("r.json");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flashrig"))
            .args(["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["workload"]["replay"]["requests"], requests, "{file}");
    }
}

/// `precondition.trace_reads` writes each distinct range the trace reads, once, and nothing
/// the trace only writes; the replay then finds the data it reads. Method: a DiskSim trace
/// whose odd requests read (one range twice) and even ones write, preconditioned on the
/// recording device; the log holds the preconditioning writes followed by the replay.
#[test]
fn trace_reads_precondition_writes_exactly_the_ranges_the_trace_reads() {
    use flashrig::replay::{precondition, PreconditionConfig};
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    // Reads of sectors 0, 64, 0 (again) and writes of 128, 192.
    for (i, (sector, op)) in [(0, 1), (128, 0), (64, 1), (192, 0), (0, 1)].iter().enumerate() {
        text.push_str(&format!("{} 0 {sector} 8 {op}\n", i * 1000));
    }
    let trace = dir.path().join("r.disksim");
    std::fs::write(&trace, text).unwrap();
    let cfg = ReplayConfig { trace, format: Some("disksim".into()), ..ReplayConfig::default() };
    let (writes, data_back) = run(RuntimeKind::Sim, 1, move || async move {
        let ram: DevRef = Arc::new(RamDevice::new("ram", 4096, 1024, 0, 0));
        let logged = Arc::new(Logger { inner: ram.clone(), writes: Mutex::new(Vec::new()) });
        let dev: DevRef = logged.clone();
        let p = PreconditionConfig { trace_reads: true, ..PreconditionConfig::default() };
        precondition(&dev, &p, 1, Some(&cfg)).await.expect("precondition");
        let writes = logged.writes.lock().clone();
        // What the trace reads now holds written data (a stamped block, not zeros).
        let mut buf = vec![0u8; 4096];
        ram.read(8, &mut buf, None).await.unwrap();
        (writes, buf.iter().any(|&b| b != 0))
    })
    .0;
    // 512-byte sectors 0 and 64 are 4 KiB blocks 0 and 8.
    assert_eq!(writes, vec![(0, 1), (8, 1)]);
    assert!(data_back);
}

/// `precondition.trace_requests` replays the first N requests of the trace as a warm-up: the
/// writes among them, in trace order, and nothing else (the reads are not written). Method:
/// the DiskSim trace of the test above repeated twice, warmed up with its first 7 requests
/// (writes of sectors 128 and 192, then 128 again) on the logging device.
#[test]
fn trace_requests_precondition_replays_the_start_of_the_trace() {
    use flashrig::replay::{precondition, PreconditionConfig};
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    let ops = [(0, 1), (128, 0), (64, 1), (192, 0), (0, 1)];
    for (i, (sector, op)) in ops.iter().chain(ops.iter()).enumerate() {
        text.push_str(&format!("{} 0 {sector} 8 {op}\n", i * 1000));
    }
    let trace = dir.path().join("w.disksim");
    std::fs::write(&trace, text).unwrap();
    let cfg = ReplayConfig { trace, format: Some("disksim".into()), ..ReplayConfig::default() };
    let writes = run(RuntimeKind::Sim, 1, move || async move {
        let ram: DevRef = Arc::new(RamDevice::new("ram", 4096, 1024, 0, 0));
        let logged = Arc::new(Logger { inner: ram.clone(), writes: Mutex::new(Vec::new()) });
        let dev: DevRef = logged.clone();
        let p =
            PreconditionConfig { trace_requests: 7, iodepth: 1, ..PreconditionConfig::default() };
        precondition(&dev, &p, 1, Some(&cfg)).await.expect("precondition");
        let w = logged.writes.lock().clone();
        w
    })
    .0;
    // Sectors 128 and 192 are 4 KiB blocks 16 and 24.
    assert_eq!(writes, vec![(16, 1), (24, 1), (16, 1)]);
}

/// `precondition.random_overwrite_ms` writes 4 KiB blocks at random offsets for that long on
/// the simulated clock, `iodepth` at a time, and stops. Method: a RAM disk with a fixed 100 us
/// latency behind the logger; 10 ms at queue depth 4 is 100 rounds of 4 writes (the last
/// round issued before the deadline, so 400 writes), all one block, spread over the device.
#[test]
fn a_timed_random_overwrite_writes_for_its_time() {
    use flashrig::replay::{precondition, PreconditionConfig};
    let (writes, end_ns) = run(RuntimeKind::Sim, 1, move || async move {
        let ram: DevRef = Arc::new(RamDevice::new("ram", 4096, 1024, 0, 100_000));
        let logged = Arc::new(Logger { inner: ram, writes: Mutex::new(Vec::new()) });
        let dev: DevRef = logged.clone();
        let p = PreconditionConfig {
            random_overwrite_ms: 10,
            iodepth: 4,
            ..PreconditionConfig::default()
        };
        precondition(&dev, &p, 7, None).await.expect("precondition");
        let writes = logged.writes.lock().clone();
        (writes, now_ns())
    })
    .0;
    assert_eq!(writes.len(), 400, "writes issued in 10 ms of 100 us writes at QD4");
    assert!(writes.iter().all(|&(lba, n)| n == 1 && lba < 1024));
    let distinct: std::collections::HashSet<u64> = writes.iter().map(|w| w.0).collect();
    assert!(distinct.len() > 200, "random offsets: {} distinct of 400", distinct.len());
    // The final flush of the precondition completes at once on a RAM disk.
    assert!((10_000_000..10_200_000).contains(&end_ns), "ended at {end_ns} ns");
}

/// Logs the (lba, blocks) of every write.
struct Logger {
    inner: DevRef,
    writes: Mutex<Vec<(u64, u64)>>,
}

#[async_trait(?Send)]
impl BlockDevice for Logger {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn kind(&self) -> &'static str {
        "logger"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.inner.read(lba, buf, md).await
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        self.writes.lock().push((lba, d.len() as u64 / self.info().block_size as u64));
        self.inner.write(lba, d, md, h).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        self.inner.trim(lba, n).await
    }
}
