//! A growable array kept in fixed chunks: growing it adds a chunk and never moves what it
//! holds. The endpoint entries were one `Vec`, and a pool of a million grew by copying
//! every entry (hundreds of MiB, with the allocator's fresh pages) under the pool lock: a
//! lease waited a second during a large import (BENCHMARKS.md, "Import scale").

use std::ops::{Index, IndexMut};

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;

pub(super) struct Chunked<T> {
    chunks: Vec<Box<[T]>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Default> Chunked<T> {
    pub(super) fn push(&mut self, v: T) {
        if self.len == self.chunks.len() * CHUNK {
            self.chunks
                .push(std::iter::repeat_with(T::default).take(CHUNK).collect());
        }
        let i = self.len;
        self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)] = v;
        self.len += 1;
    }
}

impl<T> Chunked<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| &self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)])
    }

    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        (i < self.len).then(|| &mut self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)])
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter()).take(self.len)
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("index within the array")
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("index within the array")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_keep_their_place_across_chunks() {
        let mut c: Chunked<Option<Box<u64>>> = Chunked::default();
        let n = 3 * CHUNK + 5;
        for i in 0..n as u64 {
            c.push(Some(Box::new(i)));
        }
        let first = c[0].as_deref().unwrap() as *const u64;
        // Growing never moves an item: the first one is where it was.
        c.push(None);
        assert_eq!(c[0].as_deref().unwrap() as *const u64, first);
        assert_eq!(c.len(), n + 1);
        assert_eq!(c.iter().count(), n + 1);
        assert_eq!(**c[CHUNK].as_ref().unwrap(), CHUNK as u64);
        assert!(c.get(n + 1).is_none());
        *c.get_mut(n).unwrap() = Some(Box::new(7));
        assert_eq!(
            c.iter().flatten().map(|b| **b).sum::<u64>(),
            (0..n as u64).sum::<u64>() + 7
        );
    }
}
