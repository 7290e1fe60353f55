//! Goal: misuse is a typed error, never a panic, and an erroring call writes nothing:
//! unsupported geometries (including the non-MDS ones), wrong chunk counts, chunks of
//! different lengths, bad parity rows, bad rebuild targets, a missing backend.
//! Method: call each entry point with each kind of bad argument and match the exact error;
//! check the geometry bounds from both sides.

mod common;

use flashrig_erasure::{
    bench_encode, check_geometry, isal, max_data_chunks, Backend, Codec, Error, MAX_DATA_CHUNKS,
    MAX_PARITY_CHUNKS,
};

#[test]
fn geometry_bounds() {
    for (k, m) in [(1, 1), (253, 1), (253, 2), (253, 3), (1, 4), (21, 4)] {
        assert!(Codec::new(k, m).is_ok(), "{k}+{m} is supported");
        assert_eq!(check_geometry(k, m), Ok(()));
    }
    for (k, m) in [
        (0, 1),
        (0, 0),
        (1, 0),
        (254, 1),
        (254, 2),
        (22, 4),
        (253, 4),
        (1, 5),
        (4, 8),
        (usize::MAX, 2),
    ] {
        match Codec::new(k, m) {
            Err(Error::Geometry { k: ek, m: em, reason }) => {
                assert_eq!((ek, em), (k, m));
                assert!(!reason.is_empty());
            }
            other => panic!("{k}+{m}: expected a geometry error, got {other:?}"),
        }
    }
    assert_eq!(max_data_chunks(0), 0);
    assert_eq!(max_data_chunks(2), MAX_DATA_CHUNKS);
    assert_eq!(max_data_chunks(4), 21);
    assert_eq!(max_data_chunks(MAX_PARITY_CHUNKS + 1), 0);
    let msg = Codec::new(22, 4).unwrap_err().to_string();
    assert!(msg.contains("22+4"), "{msg}");
}

#[test]
fn encode_shape_errors() {
    let codec = Codec::new(3, 2).unwrap();
    let (a, b, c, short) = (vec![1u8; 64], vec![2u8; 64], vec![3u8; 64], vec![4u8; 63]);
    let mut p = vec![0u8; 64];
    let mut q = vec![0u8; 64];
    let mut q_short = vec![0u8; 32];
    assert_eq!(
        codec.encode(&[&a, &b], &mut [&mut p, &mut q]),
        Err(Error::ChunkCount { what: "data chunks", expected: 3, got: 2 })
    );
    assert_eq!(
        codec.encode(&[&a, &b, &c], &mut [&mut p]),
        Err(Error::ChunkCount { what: "parity chunks", expected: 2, got: 1 })
    );
    assert_eq!(
        codec.encode(&[&a, &short, &c], &mut [&mut p, &mut q]),
        Err(Error::ChunkLength { index: 1, len_bytes: 63, expected_bytes: 64 })
    );
    assert_eq!(
        codec.encode(&[&a, &b, &c], &mut [&mut p, &mut q_short]),
        Err(Error::ChunkLength { index: 4, len_bytes: 32, expected_bytes: 64 })
    );
    assert!(p.iter().chain(&q).all(|&x| x == 0), "nothing written on error");
    assert_eq!(codec.encode_row(2, &[&a, &b, &c], &mut p), Err(Error::Row { row: 2, m: 2 }));
    assert_eq!(
        codec.encode_row(1, &[&a, &b, &c], &mut q_short),
        Err(Error::ChunkLength { index: 4, len_bytes: 32, expected_bytes: 64 })
    );
    assert_eq!(
        codec.encode_row(0, &[&a, &b], &mut p),
        Err(Error::ChunkCount { what: "data chunks", expected: 3, got: 2 })
    );
    // Empty chunks are fine: nothing to do.
    codec.encode(&[&[], &[], &[]], &mut [&mut [], &mut []]).unwrap();
}

#[test]
fn reconstruct_shape_errors() {
    let codec = Codec::new(4, 2).unwrap();
    let stripe = common::full_stripe(&codec, &common::random_stripe(4, 100, 1));
    let mut shards: Vec<Option<Vec<u8>>> = stripe.iter().cloned().map(Some).collect();
    shards[0] = None;
    assert_eq!(
        codec.reconstruct(&mut shards[..5]),
        Err(Error::ChunkCount { what: "chunks", expected: 6, got: 5 })
    );
    shards[3].as_mut().unwrap().pop();
    assert_eq!(
        codec.reconstruct(&mut shards),
        Err(Error::ChunkLength { index: 3, len_bytes: 99, expected_bytes: 100 })
    );
    assert!(shards[0].is_none(), "nothing allocated on error");

    assert_eq!(
        codec.decoder(&[true; 5]).unwrap_err(),
        Error::ChunkCount { what: "entries in the present mask", expected: 6, got: 5 }
    );
    let present = [false, true, true, true, true, true];
    assert_eq!(codec.decoder_for(&present, &[1]).unwrap_err(), Error::Target { index: 1 });
    assert_eq!(codec.decoder_for(&present, &[6]).unwrap_err(), Error::Target { index: 6 });
    assert_eq!(
        codec.decoder(&[false, false, false, true, true, true]).unwrap_err(),
        Error::TooManyErasures { missing: 3, m: 2 }
    );

    let d = codec.decoder(&present).unwrap();
    let mut bufs = stripe.clone();
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
    assert_eq!(
        d.reconstruct(&mut refs[..4]),
        Err(Error::ChunkCount { what: "chunks", expected: 6, got: 4 })
    );
    let (first, rest) = refs.split_at_mut(1);
    let mut with_short: Vec<&mut [u8]> = vec![&mut first[0][..50]];
    with_short.extend(rest.iter_mut().map(|r| &mut **r));
    assert_eq!(
        d.reconstruct(&mut with_short),
        Err(Error::ChunkLength { index: 1, len_bytes: 100, expected_bytes: 50 })
    );
    let sources: Vec<&[u8]> = stripe[1..5].iter().map(Vec::as_slice).collect();
    let mut out = vec![0u8; 100];
    assert_eq!(
        d.reconstruct_split(&sources[..3], &mut [&mut out]),
        Err(Error::ChunkCount { what: "source chunks", expected: 4, got: 3 })
    );
    assert_eq!(
        d.reconstruct_split(&sources, &mut []),
        Err(Error::ChunkCount { what: "target chunks", expected: 1, got: 0 })
    );
    assert_eq!(
        d.reconstruct_split(&sources, &mut [&mut out[..10]]),
        Err(Error::ChunkLength { index: 0, len_bytes: 10, expected_bytes: 100 })
    );
    d.reconstruct_split(&sources, &mut [&mut out]).unwrap();
    assert_eq!(out, stripe[0]);
}

#[test]
fn missing_backend_is_an_error() {
    if isal::available() {
        assert!(Codec::with_backend(4, 2, Backend::IsaL).is_ok());
        assert!(isal::gf_mul(3, 7).is_ok());
    } else {
        assert_eq!(
            Codec::with_backend(4, 2, Backend::IsaL).unwrap_err(),
            Error::BackendUnavailable { backend: "isa-l" }
        );
        assert!(isal::gf_mul(3, 7).is_err());
        assert!(isal::invert_matrix(&[1], 1).is_err());
    }
}

#[test]
fn bench_rejects_bad_arguments() {
    assert!(matches!(bench_encode(0, 1, 4096, 4096, 0.0), Err(Error::Geometry { .. })));
    assert!(matches!(bench_encode(4, 1, 0, 4096, 0.0), Err(Error::Geometry { .. })));
    // A zero-second run still encodes the working set once and returns a finite rate.
    let rate = bench_encode(4, 2, 4096, 1 << 16, 0.0).unwrap();
    assert!(rate.is_finite() && rate > 0.0, "{rate}");
}
