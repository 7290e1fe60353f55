//! Goal: the `file` device keeps the on-disk layout docs/formats.md describes, survives being
//! closed and reopened, picks io_uring where it should, stays sound when a command's future
//! is dropped while the kernel still owns its buffer, and, when it cannot be opened at the
//! size asked for, leaves no file of its own behind and no file that was there changed.
//!
//! Method: real files in a scratch directory under target/ (on the disk, where O_DIRECT
//! works), driven on both runtimes; the layout is checked by reading the file's bytes
//! directly, without flashrig.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevError, WriteHints};
use flashrig_devices::{uring, FileDevice, FileOptions, IoEngine};
use flashrig_runtime::{run, sleep_ns, RuntimeKind};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch directory")
}

fn opts(path: &Path, size: Option<u64>, md: u32, io: IoEngine) -> FileOptions {
    FileOptions { md_bytes_per_block: md, io, ..FileOptions::new(path, size) }
}

#[test]
fn data_and_sidecar_metadata_sit_where_the_format_says() {
    let dir = scratch();
    let path = dir.path().join("dev.img");
    let p = path.clone();
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        // 10 blocks of 4 KiB with 24 metadata bytes each.
        let dev = FileDevice::open("f", &opts(&p, Some(10 * 4096), 24, IoEngine::Auto))?;
        let data: Vec<u8> = (0..8192).map(|i| (i % 251) as u8).collect();
        let md: Vec<u8> = (0..48).map(|i| 100 + i as u8).collect();
        dev.write(3, &data, Some(&md), WriteHints::FUA).await?;
        Ok::<_, DevError>((data, md))
    });
    let (data, md) = res.expect("write");
    let f = std::fs::File::open(&path).unwrap();
    // Data at lba * block_size; metadata after the data, at the next 4 KiB boundary.
    assert_eq!(f.metadata().unwrap().len(), 10 * 4096 + 10 * 24);
    let mut got = vec![0u8; 8192];
    f.read_exact_at(&mut got, 3 * 4096).unwrap();
    assert_eq!(got, data);
    let mut got_md = vec![0u8; 48];
    f.read_exact_at(&mut got_md, 10 * 4096 + 3 * 24).unwrap();
    assert_eq!(got_md, md);
}

#[test]
fn a_reopened_file_keeps_its_size_and_contents() {
    for kind in [RuntimeKind::Sim, RuntimeKind::Real] {
        let dir = scratch();
        let path = dir.path().join("dev.img");
        let p = path.clone();
        let (res, _) = run(kind, 1, move || async move {
            let dev = FileDevice::open("f", &opts(&p, Some(64 * 4096), 16, IoEngine::Auto))?;
            dev.write(63, &[7u8; 4096], Some(&[9u8; 16]), WriteHints::NONE).await?;
            dev.trim(0, 1).await?;
            dev.flush().await?;
            drop(dev);
            // No size: the capacity comes from the file itself.
            let dev = FileDevice::open("f", &opts(&p, None, 16, IoEngine::Auto))?;
            assert_eq!(dev.info().num_blocks, 64);
            let mut buf = vec![0u8; 4096];
            let mut md = vec![0u8; 16];
            dev.read(63, &mut buf, Some(&mut md)).await?;
            assert!(buf.iter().all(|&b| b == 7) && md.iter().all(|&b| b == 9));
            dev.read(0, &mut buf, Some(&mut md)).await?;
            assert!(buf.iter().all(|&b| b == 0) && md.iter().all(|&b| b == 0));
            Ok::<_, DevError>(())
        });
        res.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    }
}

#[test]
fn a_file_that_cannot_take_its_size_is_removed_unless_it_was_there_before() {
    let dir = scratch();
    let path = dir.path().join("huge.img");
    // 2^63 bytes is past the largest file offset (set_len refuses it on any file system),
    // and with 24 metadata bytes per block the medium's size does not even fit in 64 bits.
    for (size, md) in [(1u64 << 63, 0), (u64::MAX / 4096 * 4096, 24)] {
        let err = FileDevice::open("f", &opts(&path, Some(size), md, IoEngine::Sync))
            .err()
            .unwrap_or_else(|| panic!("{size} bytes, md {md}: opened"));
        assert!(err.to_string().contains("set_len"), "{err}");
        assert!(!path.exists(), "{size} bytes, md {md}: the 0-byte file it created is left");
    }
    // A file that was there before stays, as it was.
    std::fs::write(&path, b"keep me").unwrap();
    assert!(FileDevice::open("f", &opts(&path, Some(1 << 63), 0, IoEngine::Sync)).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}

#[test]
fn auto_picks_io_uring_on_the_real_runtime_only() {
    let dir = scratch();
    let path = dir.path().join("dev.img");
    for kind in [RuntimeKind::Sim, RuntimeKind::Real] {
        let p = path.clone();
        let (uring_used, _) = run(kind, 1, move || async move {
            let dev = FileDevice::open("f", &opts(&p, Some(4096), 0, IoEngine::Auto)).unwrap();
            let snap = dev.metrics().unwrap().snapshot();
            (snap.counters["io_uring"], uring::available())
        });
        match (kind, uring_used) {
            (RuntimeKind::Sim, (used, _)) => assert_eq!(used, 0, "no io_uring on a virtual clock"),
            (RuntimeKind::Real, (used, true)) => assert_eq!(used, 1),
            (RuntimeKind::Real, (_, false)) => {
                eprintln!("skipped the io_uring half: this kernel refuses io_uring")
            }
        }
    }
    let p = path.clone();
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        FileDevice::open("f", &opts(&p, Some(4096), 0, IoEngine::Uring)).map(|_| ())
    });
    let e = res.expect_err("io_uring on the simulated runtime");
    assert!(e.to_string().contains("real runtime"), "{e}");
}

#[test]
fn dropping_a_command_in_flight_leaves_the_ring_usable() {
    if !uring::available() {
        eprintln!("skipped: this kernel refuses io_uring");
        return;
    }
    let dir = scratch();
    let path = dir.path().join("dev.img");
    let (res, _) = run(RuntimeKind::Real, 1, move || async move {
        let dev =
            Arc::new(FileDevice::open("f", &opts(&path, Some(256 * 4096), 0, IoEngine::Uring))?);
        dev.write(0, &vec![5u8; 256 * 4096], None, WriteHints::NONE).await?;
        for _ in 0..50 {
            // Poll a large read once, so it is submitted, then drop it while the kernel may
            // still be filling its buffer.
            let mut buf = vec![0u8; 256 * 4096];
            let mut fut = dev.read(0, &mut buf, None);
            let _ = futures_util::poll!(fut.as_mut());
            drop(fut);
        }
        sleep_ns(1_000_000).await;
        let mut buf = vec![0u8; 4096];
        dev.read(100, &mut buf, None).await?;
        assert!(buf.iter().all(|&b| b == 5));
        Ok::<_, DevError>(())
    });
    res.expect("ring still works");
}
