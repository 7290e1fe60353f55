//! Reader tests: every format on good and malformed input (errors name file and line,
//! `skip_bad` counts), format detection, no panics on random bytes, and the real trace slices
//! in /work/shared/traces (counts checked against its MANIFEST). Bad input (issue 17): a
//! record whose end passes 2^64 bytes, a short MSR line, a bad line among good ones that must
//! not hide the format from detection, and a file read in a format none of its lines is in.

use std::io::Cursor;
use std::path::Path;

use flashrig_trace::{detect, open, open_with, Format, Options, Reader, Request, TraceError};

fn read(
    name: &str,
    text: &str,
    f: Format,
    opts: Options,
) -> (Vec<Result<Request, TraceError>>, u64) {
    let mut r =
        Reader::from_bufread(name, Box::new(Cursor::new(text.as_bytes().to_vec())), f, opts);
    let v: Vec<_> = r.by_ref().collect();
    (v, r.skipped())
}

fn ok(name: &str, text: &str, f: Format) -> Vec<Request> {
    read(name, text, f, Options::default()).0.into_iter().map(|r| r.unwrap()).collect()
}

fn req(time_ns: u64, write: bool, offset_bytes: u64, size_bytes: u64, device: u32) -> Request {
    Request { time_ns, write, offset_bytes, size_bytes, device }
}

/// (format, good sample, sample with line 2 malformed, substring the error must contain)
fn samples() -> Vec<(Format, &'static str, &'static str, &'static str)> {
    vec![
        (
            Format::Msr,
            "128166385295514663,hm,0,Write,9056014336,2048,2833\n128166385295514878,hm,1,Read,512,4096,2617\n",
            "128166385295514663,hm,0,Write,9056014336,2048,2833\n128166385295514878,hm,0,Write,512,abc,2617\n",
            "t.csv:2: Size `abc` is not a number",
        ),
        (
            Format::Fiu,
            "89966527613304 4390 syslogd 904265560 8 W 6 0 531e779ad18bb0d2b6e97b0a93e0a1d1\n89966528104957 4390 syslogd 1 16 R 6 0 b3b3\n",
            "89966527613304 4390 syslogd 904265560 8 W 6 0 531e\n89966528104957 4390 syslogd 1 16 X 6 0 b3b3\n",
            "t.csv:2: op `X` is neither read nor write",
        ),
        (
            Format::Spc,
            "0,303567,3584,w,0.0\n1,55590,3072,r,0.000001\n",
            "0,303567,3584,w,0.0\n1,55590\n",
            "t.csv:2: missing field Size",
        ),
        (
            Format::Alibaba,
            "4,W,126703644672,4096,1577808000000071\n4,R,8192,512,1577808000000100\n",
            "4,W,126703644672,4096,1577808000000071\n4,W,-5,4096,1\n",
            "t.csv:2: offset `-5` is not a number",
        ),
        (
            Format::DiskSim,
            "0 0 303567 7 0\n78643005 1 55596 6 1\n",
            "0 0 303567 7 0\n78643005 1 55596 6\n",
            "t.csv:2: missing field flags",
        ),
        (
            Format::Vscsi,
            "1000,2048,w,4096\n2000,16,r,8192\n",
            "1000,2048,w,4096\n2000,16,q,8192\n",
            "t.csv:2: op `q` is neither read nor write",
        ),
        (
            Format::Blkparse,
            "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]\n  8,0    3        2     0.000001000   697  Q   R 16 + 16 [cat]\n",
            "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]\n  8,0    3        2     0.000001000   697  Q   W 223498 x 8 [kjournald]\n",
            "t.csv:2: expected `+` after sector",
        ),
        (
            Format::Csv,
            "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n1,5633899,28,4096,6160447\n",
            "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n1,5633899,2b,4096\n",
            "t.csv:3: 4 fields where the header names 5",
        ),
    ]
}

#[test]
fn each_reader_good_input() {
    assert_eq!(
        ok("t", samples()[0].1, Format::Msr),
        vec![
            req(12816638529551466300, true, 9056014336, 2048, 0),
            req(12816638529551487800, false, 512, 4096, 1)
        ]
    );
    assert_eq!(
        ok("t", samples()[1].1, Format::Fiu),
        vec![
            req(89966527613304, true, 904265560 * 512, 4096, 6 << 16),
            req(89966528104957, false, 512, 8192, 6 << 16)
        ]
    );
    assert_eq!(
        ok("t", samples()[2].1, Format::Spc),
        vec![req(0, true, 303567 * 512, 3584, 0), req(1000, false, 55590 * 512, 3072, 1)]
    );
    assert_eq!(
        ok("t", samples()[3].1, Format::Alibaba),
        vec![
            req(1577808000000071000, true, 126703644672, 4096, 4),
            req(1577808000000100000, false, 8192, 512, 4)
        ]
    );
    assert_eq!(
        ok("t", samples()[4].1, Format::DiskSim),
        vec![req(0, true, 303567 * 512, 7 * 512, 0), req(78643005, false, 55596 * 512, 6 * 512, 1)]
    );
    assert_eq!(
        ok("t", samples()[5].1, Format::Vscsi),
        vec![req(1_000_000, true, 2048 * 512, 4096, 0), req(2_000_000, false, 16 * 512, 8192, 0)]
    );
    assert_eq!(
        ok("t", samples()[6].1, Format::Blkparse),
        vec![req(0, true, 223490 * 512, 4096, 8 << 16), req(1000, false, 16 * 512, 8192, 8 << 16)]
    );
}

#[test]
fn each_reader_malformed_names_file_and_line_and_skip_bad_counts() {
    for (f, _, bad, want) in samples() {
        let (v, skipped) = read("t.csv", bad, f, Options::default());
        assert_eq!(skipped, 0);
        let err =
            v.iter().find_map(|r| r.as_ref().err()).unwrap_or_else(|| panic!("{f}: no error"));
        let msg = err.to_string();
        assert!(msg.starts_with(want), "{f}: got `{msg}`, want prefix `{want}`");
        let (v, skipped) = read("t.csv", bad, f, Options { skip_bad: true, ..Options::default() });
        assert_eq!(skipped, 1, "{f}");
        assert_eq!(v.len(), 1, "{f}");
        assert!(v[0].is_ok(), "{f}");
    }
}

#[test]
fn msr_variants() {
    // Leading index column, header line, CRLF endings, missing ResponseTime.
    let t = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\r\n0 128166385295514663,hm,0,Write,9056014336,2048,2833\r\n1 100,hm,2,Read,0,512\r\n";
    assert_eq!(
        ok("t", t, Format::Msr),
        vec![req(12816638529551466300, true, 9056014336, 2048, 0), req(10000, false, 0, 512, 2)]
    );
    // Reduced MSR without sizes: rejected unless a size is assumed.
    let t = "1.28166E+17,Write,3213955072\n,,\n";
    let (v, _) = read("prn.csv", t, Format::Msr, Options::default());
    assert!(v[0].as_ref().unwrap_err().to_string().contains("Size is missing"));
    let (v, _) = read(
        "prn.csv",
        t,
        Format::Msr,
        Options { assume_size_bytes: Some(4096), ..Options::default() },
    );
    assert_eq!(v.len(), 1);
    assert_eq!(*v[0].as_ref().unwrap(), req(128166000000000000 * 100, true, 3213955072, 4096, 0));
}

#[test]
fn blkparse_takes_q_or_d() {
    let full = "8,0 0 1 0.1 1 Q W 100 + 8 [a]\n8,0 0 2 0.2 1 G W 100 + 8 [a]\n8,0 0 3 0.3 1 D W 100 + 8 [a]\n8,0 0 4 0.4 1 C W 100 + 8 [0]\n8,0 0 5 0.5 1 Q FWS [a]\nCPU0 (8,0):\n Reads Queued: 0, 0KiB\n";
    assert_eq!(ok("t", full, Format::Blkparse), vec![req(100_000_000, true, 51200, 4096, 8 << 16)]);
    let donly = "8,16 1 3 0.3 1 D R 100 + 8 [a]\n8,16 1 9 0.4 1 D WS 200 + 16 [a]\n";
    assert_eq!(
        ok("t", donly, Format::Blkparse),
        vec![
            req(300_000_000, false, 51200, 4096, (8 << 16) | 16),
            req(400_000_000, true, 102400, 8192, (8 << 16) | 16)
        ]
    );
}

#[test]
fn detection_on_each_format() {
    for (f, good, _, _) in samples() {
        let lines: Vec<&str> = good.lines().collect();
        assert_eq!(detect(&lines), Some(f), "{f}");
    }
    assert_eq!(
        detect(&["0 128166385295514663,hm,0,Write,9056014336,2048,2833"]),
        Some(Format::Msr)
    );
    assert_eq!(detect(&["1.28166E+17,Write,3213955072"]), Some(Format::Msr));
    assert_eq!(detect(&["938513000 4 264719034 16 0"]), Some(Format::DiskSim));
    assert_eq!(detect(&["hello world"]), None);
    assert_eq!(detect(&[]), None);
}

#[test]
fn format_names() {
    for f in Format::ALL {
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
    }
    assert!("nope"
        .parse::<Format>()
        .unwrap_err()
        .to_string()
        .contains("unknown trace format `nope`"));
}

#[test]
fn no_panics_on_random_bytes() {
    // xorshift so the fuzz is reproducible without a rand dependency.
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet = b"0123456789,.+- \t\nRWrwQDe[]E\r\xff\x00abcWriteRead";
    for round in 0..400 {
        let len = (next() % 300) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                let v = next();
                if round % 2 == 0 {
                    v as u8
                } else {
                    alphabet[(v % alphabet.len() as u64) as usize]
                }
            })
            .collect();
        for f in Format::ALL {
            for skip_bad in [false, true] {
                let opts = Options { skip_bad, assume_size_bytes: Some(4096) };
                let r = Reader::from_bufread("fuzz", Box::new(Cursor::new(bytes.clone())), f, opts);
                for item in r {
                    let _ = item;
                }
            }
            let s = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = s.lines().collect();
            let _ = detect(&lines);
        }
    }
}

const TRACES: &str = "/work/shared/traces";

fn traces_dir() -> Option<&'static Path> {
    let p = Path::new(TRACES);
    if p.is_dir() {
        Some(p)
    } else {
        println!("skipped: {TRACES} is missing");
        None
    }
}

fn count(path: &Path, f: Format, opts: Options) -> (u64, u64, u64) {
    let (mut n, mut w, mut r) = (0, 0, 0);
    for q in open_with(path, f, opts).unwrap() {
        let q = q.unwrap();
        n += 1;
        if q.write {
            w += 1
        } else {
            r += 1
        }
    }
    (n, w, r)
}

#[test]
fn real_slices_match_manifest() {
    let Some(d) = traces_dir() else { return };
    assert_eq!(
        count(&d.join("mqsim/tpcc-small.trace"), Format::DiskSim, Options::default()),
        (6999, 2618, 4381)
    );
    assert_eq!(
        count(&d.join("ssdsim/example.ascii"), Format::DiskSim, Options::default()),
        (10000, 5923, 4077)
    );
    let (n, _, _) = count(&d.join("msr/hm_0_first899.csv"), Format::Msr, Options::default());
    assert_eq!(n, 899);
    // prn_0_reduced has no sizes: a clear error by default, readable with an assumed 4 KiB.
    let first = open(d.join("msr/prn_0_reduced_SZU047.csv"), Format::Msr).unwrap().next().unwrap();
    let msg = first.unwrap_err().to_string();
    assert!(
        msg.starts_with("prn_0_reduced_SZU047.csv:1: ") && msg.contains("Size is missing"),
        "{msg}"
    );
    let opts = Options { assume_size_bytes: Some(4096), ..Options::default() };
    assert_eq!(
        count(&d.join("msr/prn_0_reduced_SZU047.csv"), Format::Msr, opts),
        (96568, 59061, 37507)
    );
    // Detection on each real file's first lines.
    for (p, f) in [
        ("mqsim/tpcc-small.trace", Format::DiskSim),
        ("ssdsim/example.ascii", Format::DiskSim),
        ("msr/hm_0_first899.csv", Format::Msr),
        ("msr/prn_0_reduced_SZU047.csv", Format::Msr),
    ] {
        let text = std::fs::read_to_string(d.join(p)).unwrap();
        let lines: Vec<&str> = text.lines().take(20).collect();
        assert_eq!(detect(&lines), Some(f), "{p}");
    }
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let e = open("/nonexistent/dir/x.csv", Format::Msr).err().unwrap();
    assert!(e.to_string().starts_with("x.csv: "), "{e}");
}

#[test]
fn a_record_ending_past_2_pow_64_bytes_is_rejected_naming_line_and_fields() {
    // Offset 2^64 - 1 plus any size wraps around; it must be an error, not a request.
    let t = "128166385295514663,hm,0,Write,0,4096,1\n\
             128166385295514664,hm,0,Write,18446744073709551615,4096,1\n";
    let (v, _) = read("t.csv", t, Format::Msr, Options::default());
    assert_eq!(v.len(), 2);
    let msg = v[1].as_ref().unwrap_err().to_string();
    assert!(msg.starts_with("t.csv:2: Offset + Size overflows"), "{msg}");
    assert!(msg.contains("18446744073709551615"), "{msg}");
    // The same check for formats counted in sectors: DiskSim's lba + size.
    let lba = u64::MAX / 512;
    let t = format!("0 0 {lba} 8 0\n");
    let (v, _) = read("t.trace", &t, Format::DiskSim, Options::default());
    let msg = v[0].as_ref().unwrap_err().to_string();
    assert!(msg.starts_with("t.trace:1: lba + size overflows"), "{msg}");
    // skip_bad skips it like any other malformed line.
    let t = "1,hm,0,Write,0,4096,1\n2,hm,0,Write,18446744073709551615,1,1\n";
    let (v, skipped) =
        read("t.csv", t, Format::Msr, Options { skip_bad: true, ..Options::default() });
    assert_eq!((v.len(), skipped), (1, 1));
    // Detection still recognises the file, so the error names the line.
    let lines = ["128166385295514663,hm,0,Write,18446744073709551615,4096,1"];
    assert_eq!(detect(&lines), Some(Format::Msr));
}

#[test]
fn a_short_msr_line_says_it_has_too_few_fields() {
    for (line, fields) in [
        ("128166385295514663,hm,0", 3),
        ("128166385295514663,hm,0,Write", 4),
        ("128166385295514663,hm,0,Write,4096", 5),
        ("128166385295514663", 1),
    ] {
        let (v, _) = read("t.csv", &format!("{line}\n"), Format::Msr, Options::default());
        let msg = v[0].as_ref().unwrap_err().to_string();
        assert!(msg.starts_with(&format!("t.csv:1: too few fields: {fields} ")), "{msg}");
    }
}

#[test]
fn a_bad_line_among_good_ones_does_not_hide_the_format() {
    let t = "128166385295514663,hm,0,Write,0,4096,1\n\
             128166385295514664,hm,0,Write,4096,4096,1\n\
             128166385295514665,hm,0,Write,abc,4096,1\n";
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(detect(&lines), Some(Format::Msr));
    let (v, _) = read("t.csv", t, Format::Msr, Options::default());
    assert_eq!(v[2].as_ref().unwrap_err().to_string(), "t.csv:3: Offset `abc` is not a number");
    // A first line that is bad, and good ones after it, too.
    let lines = ["128166385295514663,hm,0,Write,xyz,4096,1", lines[0], lines[1]];
    assert_eq!(detect(&lines), Some(Format::Msr));
    // Mostly garbage is still no format.
    assert_eq!(detect(&["hello world", "what is this", "0 0 1 8 0"]), None);
}

#[test]
fn a_file_no_line_of_which_is_in_the_chosen_format_is_an_error() {
    let msr = "128166385295514663,hm,0,Write,0,4096,1\n128166385295514664,hm,0,Read,0,4096,1\n";
    // blkparse skips lines that are not events, so an MSR file read as blkparse used to give
    // zero requests and no error.
    let (v, _) = read("t.csv", msr, Format::Blkparse, Options::default());
    assert_eq!(v.len(), 1, "{v:?}");
    let msg = v[0].as_ref().unwrap_err().to_string();
    assert!(msg.starts_with("t.csv:1: no line reads as a blkparse trace"), "{msg}");
    // With skip_bad every line is skipped: still an error, naming the first bad line.
    let (v, skipped) =
        read("t.csv", msr, Format::Fiu, Options { skip_bad: true, ..Options::default() });
    assert_eq!(skipped, 2);
    let msg = v.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(
        msg.starts_with("t.csv:1: no line reads as a fiu trace (2 malformed lines skipped)"),
        "{msg}"
    );
    // Without it, the first line's error says which format it was read as.
    let (v, _) = read("t.csv", msr, Format::DiskSim, Options::default());
    let msg = v[0].as_ref().unwrap_err().to_string();
    assert!(msg.starts_with("t.csv:1: ") && msg.contains("reading the file as disksim"), "{msg}");
    // An empty file, a header alone, and blkparse output with events but none replayed
    // (completions only) are no error.
    for (text, f) in [
        ("", Format::Blkparse),
        ("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n", Format::Msr),
        ("8,0 0 4 0.4 1 C W 100 + 8 [0]\nCPU0 (8,0):\n", Format::Blkparse),
    ] {
        let (v, _) = read("t", text, f, Options::default());
        assert!(v.is_empty(), "{f}: {v:?}");
    }
}

#[test]
fn a_record_larger_than_a_gib_is_rejected_naming_the_field() {
    // Found by fuzzing: one Alibaba line of 10^15 bytes made `trace stats` account 2^38 pages
    // (minutes, gigabytes). Sizes past 1 GiB are misread fields, not requests.
    let t = "4,W,0,1073741824,1577808000000071\n4,W,0,1073741825,1577808000000072\n";
    let (v, _) = read("t.csv", t, Format::Alibaba, Options::default());
    assert_eq!(v[0].as_ref().unwrap().size_bytes, flashrig_trace::formats::MAX_REQUEST_BYTES);
    let msg = v[1].as_ref().unwrap_err().to_string();
    assert!(msg.starts_with("t.csv:2: length gives a request of 1073741825 bytes"), "{msg}");
    // In sectors too, and skipped like any malformed line with skip_bad.
    let t = "0 0 0 2097153 0\n0 0 0 8 0\n";
    let (v, skipped) =
        read("t.trace", t, Format::DiskSim, Options { skip_bad: true, ..Options::default() });
    assert_eq!((v.len(), skipped), (1, 1));
}
