//! What decoding a compressed body for a `[[ban]]` body rule may allocate, measured with a
//! counting global allocator (the peak of live bytes while it runs): the output is at most
//! `body_bytes`, and the decoder's own state is fixed, so a bomb costs what a small page
//! does. One test in this binary, so no other test allocates while it measures.

mod common;

use std::io::Write;

use proxypool::ban::{decode, Coding, BROTLI_RING_CAP, DEFAULT_BODY_BYTES};

use common::counting::{peak, reset_peak, Counting};

#[global_allocator]
static A: Counting = Counting;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn br(data: &[u8], lgwin: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, lgwin);
    w.write_all(data).unwrap();
    drop(w);
    out
}

/// Peak bytes allocated while decoding `input` (held as a body rule holds it: at most
/// `limit` bytes of it), and the bytes it decoded to.
fn cost(coding: Coding, input: &[u8], limit: usize) -> (isize, usize) {
    let held = &input[..input.len().min(limit)];
    let before = reset_peak();
    let out = decode(coding, held, limit);
    let len = out.len();
    drop(out);
    (peak() - before, len)
}

#[test]
fn a_bomb_costs_body_bytes_and_the_decoders_fixed_state() {
    let limit = DEFAULT_BODY_BYTES;
    // gzip and deflate: the output and the inflate state (43 KiB), whatever the stream
    // expands to.
    const INFLATE: isize = 64 * 1024;
    for size in [1usize << 20, 32 << 20] {
        let zeros = vec![0u8; size];
        for (coding, body) in [
            (Coding::Gzip, gzip(&zeros)),
            (Coding::Deflate, zlib(&zeros)),
        ] {
            let (bytes, len) = cost(coding, &body, limit);
            eprintln!(
                "{coding:?} of {size} zeros ({} bytes): peak {bytes} B",
                body.len()
            );
            assert_eq!(len, limit);
            assert!(
                bytes <= limit as isize + INFLATE,
                "{coding:?} {size}: {bytes}"
            );
        }
    }
    // br: the output and the ring buffer, which the decoder sizes from the stream's
    // blocks, at most BROTLI_RING_CAP: a small window decodes, a huge one is refused.
    const TABLES: isize = 512 * 1024;
    for (size, lgwin, decodes) in [(1usize << 20, 16, true), (16 << 20, 24, false)] {
        let zeros = vec![0u8; size];
        let body = br(&zeros, lgwin);
        drop(zeros);
        let (bytes, len) = cost(Coding::Brotli, &body, limit);
        eprintln!(
            "br of {size} zeros, window 2^{lgwin} ({} bytes): peak {bytes} B",
            body.len()
        );
        assert_eq!(len == limit, decodes, "{size}");
        assert!(
            bytes <= limit as isize + BROTLI_RING_CAP as isize + TABLES,
            "br {size}: {bytes}"
        );
    }
}
