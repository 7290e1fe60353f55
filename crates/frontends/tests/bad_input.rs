//! Goal: bad input to the frontends gets a message that names the problem and where it is
//! (issue 17): a configuration error names the key path (`device.k`, also inside members) and
//! the line of the offending value, not the `[device]` header; a size too large says so; an
//! fio job's `numjobs`/`iodepth` out of range shows the number written; a chunk larger than a
//! member names the member and both sizes in blocks, when the stack is built; a `zoned` layer
//! whose zone capacity, open limit or zone size does not fit says which.
//!
//! Method: `Config::from_toml` and `FioJob::parse` on small texts, and `stack::build` of a
//! parsed configuration on the simulated runtime; the error strings are checked for the key,
//! the line and the number, and for the misleading wording they used to have.

use std::path::Path;

use flashrig_frontends::config::Config;
use flashrig_frontends::fiojob::FioJob;
use flashrig_frontends::stack;
use flashrig_runtime::RuntimeKind;

fn config_error(text: &str) -> String {
    match Config::from_toml(text, Path::new("c.toml")) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_bad_device_key_is_named_with_its_line() {
    // A wrong type: the key and its line, with the line shown.
    let e = config_error(
        "seed = 1\n\n[device]\ntype = \"raid\"\nk = \"four\"\nm = 1\n\
         member = { type = \"ram\", capacity = \"64MiB\" }\n",
    );
    assert!(e.contains("device.k (line 5, column 5)"), "{e}");
    assert!(e.contains("expected usize"), "{e}");
    assert!(e.contains("5 | k = \"four\""), "{e}");
    // An unknown key: the key itself, not the table header.
    let e = config_error("[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\nblok_size = 3\n");
    assert!(e.contains("device.blok_size (line 4, column 1)"), "{e}");
    assert!(!e.contains("line 1"), "{e}");
    // Inside a member list and a member template.
    let e = config_error(
        "[device]\ntype = \"stripe\"\nmembers = [\n  { type = \"ram\" },\n  \
         { type = \"ram\", latency_ns = \"slow\" },\n]\n",
    );
    assert!(e.contains("device.members[1].latency_ns (line 5, column"), "{e}");
    let e = config_error(
        "[device]\ntype = \"stripe\"\nwidth = 2\n\n[device.member]\ntype = \"ram\"\ncapcity = \"1GiB\"\n",
    );
    assert!(e.contains("device.member.capcity (line 7, column 1)"), "{e}");
    // An unknown device type points at the type.
    let e = config_error("[device]\ntype = \"floppy\"\n");
    assert!(e.contains("device.type (line 2, column 8)") && e.contains("floppy"), "{e}");
    // Outside the device, too.
    let e = config_error("[workload]\nbs = \"4KiB\"\niodepth = \"x\"\n");
    assert!(e.contains("workload.iodepth (line 3, column 11)"), "{e}");
}

#[test]
fn a_size_too_large_says_it_is_too_large() {
    let e = config_error("[device]\ntype = \"ram\"\ncapacity = \"99999999TiB\"\n");
    assert!(e.contains("device.capacity (line 3, column 12)"), "{e}");
    assert!(e.contains("too large"), "{e}");
    assert!(!e.contains("whole number"), "{e}");
    // The largest whole sizes are read exactly, and a fraction of a byte is still refused.
    let e = config_error("[device]\ntype = \"ram\"\ncapacity = \"0.5\"\n");
    assert!(e.contains("device.capacity") && e.contains("not a whole number of bytes"), "{e}");
    use flashrig_frontends::size::parse_size;
    assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    assert!(parse_size("18446744073709551616").unwrap_err().contains("too large"));
    assert!(parse_size("16777216TiB").unwrap_err().contains("too large"));
    assert_eq!(parse_size("16777215TiB"), Ok(16_777_215 << 40));
    assert!(parse_size("0.1").unwrap_err().contains("whole number"));
}

#[test]
fn fio_numbers_out_of_range_are_shown_as_written() {
    for (key, max) in [("numjobs", 4096), ("iodepth", 65536)] {
        for v in ["99999999999", "4294967297", "0"] {
            let text = format!("[job]\nrw=randread\n{key}={v}\n");
            let e = FioJob::parse(&text, "j.fio", None).unwrap_err().to_string();
            assert!(
                e.contains(&format!("j.fio:3: {key}: {v}: must be between 1 and {max}")),
                "{e}"
            );
        }
    }
}

#[test]
fn a_chunk_larger_than_a_member_names_the_member() {
    let cfg = Config::from_toml(
        "[device]\ntype = \"stripe\"\nchunk = \"1GiB\"\nmembers = [\n  \
         { type = \"ram\", capacity = \"2GiB\" },\n  { type = \"ram\", capacity = \"64MiB\" },\n]\n",
        Path::new("c.toml"),
    )
    .unwrap();
    let (res, _) = flashrig_runtime::run(RuntimeKind::Sim, 1, move || async move {
        stack::build(&cfg.device).await.map(|_| ())
    });
    let e = res.unwrap_err().to_string();
    assert!(
        e.contains(
            "device.chunk = 1GiB (262144 blocks) is larger than member device.members[1] `ram1` \
             (16384 blocks of 4096 bytes)"
        ),
        "{e}"
    );
    assert!(!e.contains("invalid command"), "{e}");
}

#[test]
fn a_zoned_layer_with_a_capacity_past_its_zone_says_so() {
    let e = config_error(
        "[device]\ntype = \"zoned\"\nzone = \"1MiB\"\nzone_capacity = \"2MiB\"\n\
         member = { type = \"ram\", capacity = \"64MiB\" }\n",
    );
    assert!(e.contains("zone = 1MiB, zone_capacity = 2MiB: need 0 < zone_capacity <= zone"), "{e}");
    let e = config_error(
        "[device]\ntype = \"zoned\"\nzone = \"1MiB\"\nmax_open_zones = 4\nmax_active_zones = 2\n\
         member = { type = \"ram\", capacity = \"64MiB\" }\n",
    );
    assert!(e.contains("max_open_zones = 4 exceeds max_active_zones = 2"), "{e}");
    // A zone that is not a whole number of the member's blocks, when the stack is built.
    let cfg = Config::from_toml(
        "[device]\ntype = \"zoned\"\nzone = \"6KiB\"\nmember = { type = \"ram\", capacity = \"64MiB\" }\n",
        Path::new("c.toml"),
    )
    .unwrap();
    let (res, _) = flashrig_runtime::run(RuntimeKind::Sim, 1, move || async move {
        stack::build(&cfg.device).await.map(|_| ())
    });
    let e = res.unwrap_err().to_string();
    assert!(
        e.contains("device.zone = 6KiB: not a multiple of the member's 4096-byte block"),
        "{e}"
    );
}

#[test]
fn a_csal_device_names_the_key_at_fault() {
    let fast = "{ type = \"ram\", capacity = \"16MiB\", md_bytes = 64 }";
    let e = config_error(&format!("[device]\ntype = \"csal\"\nmembers = [{fast}]\n"));
    assert!(
        e.contains("device.members: csal takes exactly 2 members, [fast, zoned]; got 1"),
        "{e}"
    );
    let e = config_error(&format!(
        "[device]\ntype = \"csal\"\nrecovery = \"fast\"\nmembers = [{fast}, {fast}]\n"
    ));
    assert!(e.contains("device.recovery = \"fast\": one of"), "{e}");
    // A second member without zones, when the stack is built.
    let cfg = Config::from_toml(
        &format!("[device]\ntype = \"csal\"\nmembers = [{fast}, {fast}]\n"),
        Path::new("c.toml"),
    )
    .unwrap();
    let (res, _) = flashrig_runtime::run(RuntimeKind::Sim, 1, move || async move {
        stack::build(&cfg.device).await.map(|_| ())
    });
    let e = res.unwrap_err().to_string();
    assert!(e.contains("device.members[1]") && e.contains("must be zoned"), "{e}");
    // A zoned member without room for the per-block record (the fast one may have none).
    let cfg = Config::from_toml(
        "[device]\ntype = \"csal\"\nmembers = [{ type = \"ram\", capacity = \"16MiB\" }, \
         { type = \"zoned\", zone = \"1MiB\", member = { type = \"ram\", capacity = \"64MiB\" } }]\n",
        Path::new("c.toml"),
    )
    .unwrap();
    let (res, _) = flashrig_runtime::run(RuntimeKind::Sim, 1, move || async move {
        stack::build(&cfg.device).await.map(|_| ())
    });
    let e = res.unwrap_err().to_string();
    assert!(
        e.contains("csal: member zoned1 stores 0 metadata bytes") && e.contains("md_bytes = 64"),
        "{e}"
    );
}

/// `workload.ramp_ms` (fio's `ramp_time`): zero, more than a day, and a ramp before a replay
/// are refused with the key named; a zero-latency stack, on which a ramp would never end,
/// fails the run with a message instead of hanging.
#[test]
fn a_bad_ramp_is_named() {
    let ram = "[device]\ntype = \"ram\"\ncapacity = \"1MiB\"\n";
    let e = config_error(&format!("{ram}[workload]\nruntime_ms = 10\nramp_ms = 0\n"));
    assert!(e.contains("workload.ramp_ms must be positive"), "{e}");
    let e = config_error(&format!("{ram}[workload]\nruntime_ms = 10\nramp_ms = 99999999999\n"));
    assert!(e.contains("workload.ramp_ms = 99999999999: at most"), "{e}");
    let e = config_error(&format!("{ram}[workload]\nramp_ms = 5\n[replay]\ntrace = \"t.csv\"\n"));
    assert!(e.contains("workload.ramp_ms") && e.contains("[replay]"), "{e}");
    let cfg = Config::from_toml(
        &format!("runtime = \"sim\"\n{ram}[workload]\nsize = \"64KiB\"\nramp_ms = 5\n"),
        Path::new("c.toml"),
    )
    .unwrap();
    let Err(e) = flashrig_frontends::run::run(&cfg) else { panic!("a ramp that never ends ran") };
    let e = e.to_string();
    assert!(e.contains("workload.ramp_ms = 5") && e.contains("never ends"), "{e}");
}

/// `precondition.random_overwrite_ms`: more than a day is refused with the key named, and on a
/// zero-latency stack, where the clock never reaches the end of the overwrite, the run fails
/// with a message naming it instead of hanging.
#[test]
fn a_bad_timed_overwrite_is_named() {
    let ram = "[device]\ntype = \"ram\"\ncapacity = \"1MiB\"\n";
    let e = config_error(&format!("{ram}[precondition]\nrandom_overwrite_ms = 99999999999\n"));
    assert!(e.contains("precondition.random_overwrite_ms = 99999999999: at most"), "{e}");
    let cfg = Config::from_toml(
        &format!(
            "runtime = \"sim\"\n{ram}[workload]\nsize = \"64KiB\"\n\
             [precondition]\nrandom_overwrite_ms = 5\n"
        ),
        Path::new("c.toml"),
    )
    .unwrap();
    let Err(e) = flashrig_frontends::run::run(&cfg) else { panic!("an endless overwrite ran") };
    let e = e.to_string();
    assert!(e.contains("precondition.random_overwrite_ms = 5") && e.contains("never ends"), "{e}");
}
