//! The first bytes of a body decoded for matching: gzip, deflate and br, never more
//! output than asked for. The input is a prefix of the body, so a stream that stops
//! short is the normal case: what decoded until then is kept.

use std::borrow::Cow;
use std::cell::Cell;
use std::io::Read;
use std::rc::Rc;

use brotli_decompressor::reader::DecompressorCustomAlloc;
use brotli_decompressor::{Allocator, HuffmanCode};
use brotli_decompressor::{SliceWrapper, SliceWrapperMut};
use hyper::header::CONTENT_ENCODING;
use hyper::HeaderMap;

/// The most a br stream's ring buffer may take. The decoder sizes it by what the
/// stream's blocks announce, not by the output wanted, so a hostile stream could ask for
/// its whole window (16 MiB); with this cap it is refused instead, and the body
/// condition does not hold. Encoders' blocks fit in it for any page under a megabyte.
pub const BROTLI_RING_CAP: usize = 1024 * 1024;

/// Input read into the br decoder at a time.
const BROTLI_INPUT_CHUNK: usize = 4096;

/// A body's content coding, as far as matching can undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// None, or `identity`.
    Identity,
    /// `gzip`, `x-gzip`.
    Gzip,
    /// `deflate`: zlib as the standard says, or the raw deflate some servers send.
    Deflate,
    /// `br`.
    Brotli,
}

impl Coding {
    /// The coding `Content-Encoding` names; None for one this cannot undo (another
    /// coding, or several applied on top of each other).
    pub fn of(headers: &HeaderMap) -> Option<Coding> {
        let mut found = Coding::Identity;
        for v in headers.get_all(CONTENT_ENCODING) {
            for token in v.to_str().ok()?.split(',') {
                let c = match token.trim().to_ascii_lowercase().as_str() {
                    "" | "identity" => continue,
                    "gzip" | "x-gzip" => Coding::Gzip,
                    "deflate" => Coding::Deflate,
                    "br" => Coding::Brotli,
                    _ => return None,
                };
                if found != Coding::Identity {
                    return None;
                }
                found = c;
            }
        }
        Some(found)
    }
}

/// At most `limit` bytes of `input` decoded by `coding`: all it yields before its input
/// ends or turns out not to be that coding.
pub fn decode(coding: Coding, input: &[u8], limit: usize) -> Cow<'_, [u8]> {
    match coding {
        Coding::Identity => Cow::Borrowed(&input[..input.len().min(limit)]),
        Coding::Gzip => Cow::Owned(read_up_to(
            flate2::bufread::MultiGzDecoder::new(Unended(input)),
            limit,
        )),
        Coding::Deflate => {
            let zlib = read_up_to(flate2::bufread::ZlibDecoder::new(Unended(input)), limit);
            if zlib.is_empty() && !input.is_empty() {
                let raw = flate2::bufread::DeflateDecoder::new(Unended(input));
                return Cow::Owned(read_up_to(raw, limit));
            }
            Cow::Owned(zlib)
        }
        Coding::Brotli => Cow::Owned(brotli(input, limit)),
    }
}

/// A prefix of a stream read as one whose rest has not come yet: at its end a read
/// would block. At the end of its input a decoder finishes the stream and, finding it
/// cut, fails that read, losing what it decoded in it; one that waits for more hands
/// out each piece as it decodes it.
struct Unended<'a>(&'a [u8]);

impl Read for Unended<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0.is_empty() && !buf.is_empty() {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        self.0.read(buf)
    }
}

// Read in place: no buffer of the decoder's own beside the input.
impl std::io::BufRead for Unended<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.0.is_empty() {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        Ok(self.0)
    }

    fn consume(&mut self, n: usize) {
        self.0 = &self.0[n.min(self.0.len())..];
    }
}

/// Read until `limit` bytes, the end, or an error (a truncated or bad stream): one
/// buffer of `limit` bytes at most, whatever the stream claims.
fn read_up_to(mut r: impl Read, limit: usize) -> Vec<u8> {
    let mut out = vec![0u8; limit];
    let mut n = 0;
    while n < limit {
        match r.read(&mut out[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    out.truncate(n);
    out
}

fn brotli(input: &[u8], limit: usize) -> Vec<u8> {
    let budget = Rc::new(Cell::new(BROTLI_RING_CAP + BROTLI_SLACK));
    let d = DecompressorCustomAlloc::new(
        input,
        Block(vec![0u8; BROTLI_INPUT_CHUNK].into_boxed_slice()),
        Budget(budget),
        Plain,
        Plain,
    );
    read_up_to(d, limit)
}

/// What the br decoder takes beside its ring buffer from the same budget: context maps
/// (at most 256 × 64 + 256 × 4 bytes), context modes (256) and the ring buffer's own slack.
const BROTLI_SLACK: usize = 64 * 1024;

/// One allocation of the br decoder.
#[derive(Default)]
struct Block<T>(Box<[T]>);

impl<T> SliceWrapper<T> for Block<T> {
    fn slice(&self) -> &[T] {
        &self.0
    }
}

impl<T> SliceWrapperMut<T> for Block<T> {
    fn slice_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// The br decoder's byte allocations (ring buffer, context maps) within a budget: an
/// allocation past it comes back empty, which the decoder reports as an error.
struct Budget(Rc<Cell<usize>>);

impl Allocator<u8> for Budget {
    type AllocatedMemory = Block<u8>;
    fn alloc_cell(&mut self, len: usize) -> Block<u8> {
        let left = self.0.get();
        if len > left {
            return Block::default();
        }
        self.0.set(left - len);
        Block(vec![0u8; len].into_boxed_slice())
    }
    fn free_cell(&mut self, data: Block<u8>) {
        self.0.set(self.0.get() + data.0.len());
    }
}

/// The decoder's Huffman tables: their sizes are fixed by the format, whatever the
/// stream says.
struct Plain;

impl<T: Clone + Default> Allocator<T> for Plain {
    type AllocatedMemory = Block<T>;
    fn alloc_cell(&mut self, len: usize) -> Block<T> {
        Block(vec![T::default(); len].into_boxed_slice())
    }
    fn free_cell(&mut self, _: Block<T>) {}
}

// The decoder's table types, named so that a change of them in the crate shows here.
const _: fn(&mut Plain) -> Block<HuffmanCode> = |p| p.alloc_cell(0);
const _: fn(&mut Plain) -> Block<u32> = |p| p.alloc_cell(0);
