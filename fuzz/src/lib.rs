//! The part of the fuzz targets shared by both: decoding the fuzzer's bytes
//! into operations, and the model of live blocks that checks every result.
//!
//! Every block is filled with a pattern derived from a unique tag when it is
//! handed out and checked before it is freed or reallocated; the shadow
//! model (from devutils) rejects a misaligned block or one that overlaps a
//! live block.
#![deny(unsafe_op_in_unsafe_fn)]

use devutils::{Block, Shadow, pattern};

/// Largest block whose every byte is filled and checked; larger blocks get
/// their first and last 4 KiB and at most 64 bytes in between.
pub const FULL: usize = 16 * 1024;
/// Most live blocks at once (well below the 128 slots of the largest size
/// class, so no request can legitimately run out of slots).
pub const MAX_LIVE: usize = 48;
/// Most bytes live at once, so the fuzzer's RSS stays bounded: slots keep
/// their pages once touched, so the resident set is about this much per
/// size class (at 48 MiB and 4 MiB blocks it reached 3 GB in 10 minutes).
pub const MAX_LIVE_BYTES: usize = 16 << 20;
/// Largest size of an ordinary (slot-sized or over-aligned) request.
pub const MAX_SIZE: usize = 2 << 20;
/// A "huge" request: past the largest slot (2 GiB), so it is a mapping of
/// its own. Only ever touched sparsely, and never copied in full (see
/// [`Input::size`]).
pub const HUGE: usize = (2 << 30) + 4096;

/// The fuzzer's bytes, read front to back; running out ends the run.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads from `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// The next byte.
    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }

    /// A size spread over every size class: a band `2^(k-1) < size <= 2^k`
    /// for `k` in `0..=21`, a position inside it biased towards the band's
    /// edges, or (rarely) a huge size. Never 0 unless `allow_zero`.
    pub fn size(&mut self, allow_zero: bool) -> Option<usize> {
        let k = self.byte()?;
        let pos = self.u16()?;
        if k == 0xff {
            return Some(HUGE + (pos as usize) * 4096);
        }
        if allow_zero && k == 0xfe {
            return Some(0);
        }
        let k = (k % 22) as u32;
        let hi = 1usize << k;
        let lo = hi / 2 + 1;
        let size = match pos & 3 {
            0 => hi,
            1 => lo,
            2 => hi.saturating_sub(pos as usize >> 2).max(lo),
            _ => lo + (pos as usize >> 2) % (hi - lo + 1),
        };
        Some(size.clamp(1, MAX_SIZE))
    }

    /// An alignment: mostly small, sometimes up to 2^33 (past the largest
    /// slot's 2^31, which makes a big over-aligned mapping).
    pub fn align(&mut self) -> Option<usize> {
        let a = self.byte()?;
        Some(if a < 160 { 1 << (a % 5) } else { 1 << (a % 34) })
    }
}

/// Offsets of a block of `size` bytes that get the fill pattern.
pub fn touched(size: usize) -> impl Iterator<Item = usize> {
    let (head, tail_start) = if size <= FULL {
        (size, size)
    } else {
        (4096, size - 4096)
    };
    // At most 64 samples in between: a huge block stays sparse in memory.
    let step = (size / 64).max(64 * 1024);
    let middle = (head..tail_start).step_by(step).skip(1);
    (0..head).chain(middle).chain(tail_start..size)
}

/// Writes the pattern of `tag` into a block.
///
/// # Safety
/// `p..p+size` is writable and owned by the caller.
pub unsafe fn fill(p: *mut u8, size: usize, tag: u64) {
    for i in touched(size) {
        // SAFETY: `i < size`.
        unsafe { p.add(i).write(pattern(tag, i)) };
    }
}

/// Checks the pattern of `tag` of a block of `size` bytes, at the offsets
/// below `upto` (what a reallocation kept); panics on the first difference.
///
/// # Safety
/// `p..p+upto` is readable.
pub unsafe fn check(p: *const u8, size: usize, upto: usize, tag: u64) {
    for i in touched(size).filter(|&i| i < upto) {
        // SAFETY: `i < upto`.
        let got = unsafe { p.add(i).read() };
        assert_eq!(
            got,
            pattern(tag, i),
            "block {p:p} (size {size}, tag {tag:#x}) corrupted at offset {i}"
        );
    }
}

/// Checks that a block reads as zero (every byte up to [`FULL`], then the
/// sampled offsets).
///
/// # Safety
/// `p..p+size` is readable.
pub unsafe fn check_zero(p: *const u8, size: usize) {
    for i in touched(size) {
        // SAFETY: `i < size`.
        let got = unsafe { p.add(i).read() };
        assert_eq!(
            got, 0,
            "zeroed block {p:p} (size {size}) has {got:#x} at {i}"
        );
    }
}

/// The size to realloc block `b` to, given the input's `new_size`: huge or
/// over-aligned blocks may move by copying, so their copies are kept small.
pub fn realloc_size(b: &Block, new_size: usize) -> usize {
    if b.size >= HUGE || b.align > 4096 {
        new_size.min(MAX_SIZE)
    } else {
        new_size
    }
}

/// The live blocks of one fuzz run.
#[derive(Default)]
pub struct Live {
    shadow: Shadow,
    blocks: Vec<Block>,
    bytes: usize,
    next_tag: u64,
}

impl Live {
    /// No block yet; tags of this run start from `seed` (so a block left
    /// over from another run could not match by accident).
    pub fn new(seed: u64) -> Live {
        Live {
            next_tag: seed << 32,
            ..Live::default()
        }
    }

    /// Whether a block of `size` more bytes fits the bounds.
    pub fn has_room(&self, size: usize) -> bool {
        self.blocks.len() < MAX_LIVE && (size >= HUGE || self.bytes + size <= MAX_LIVE_BYTES)
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is live.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Records a new block at `p` (checked for alignment and overlap) and
    /// fills it; returns its tag.
    ///
    /// # Safety
    /// `p..p+size` was just handed out to the caller.
    pub unsafe fn add(&mut self, p: *mut u8, size: usize, align: usize) -> u64 {
        self.next_tag += 1;
        let b = Block {
            addr: p.expose_provenance(),
            size,
            align,
            tag: self.next_tag,
        };
        self.shadow.insert(b);
        self.blocks.push(b);
        if size < HUGE {
            self.bytes += size;
        }
        // SAFETY: per the contract.
        unsafe { fill(p, size, b.tag) };
        b.tag
    }

    /// Removes the block chosen by `pick` after checking its contents.
    pub fn take(&mut self, pick: u8) -> Option<(*mut u8, Block)> {
        if self.blocks.is_empty() {
            return None;
        }
        let b = self.blocks.swap_remove(pick as usize % self.blocks.len());
        self.shadow.remove(b.addr);
        if b.size < HUGE {
            self.bytes -= b.size;
        }
        let p = std::ptr::with_exposed_provenance_mut::<u8>(b.addr);
        // SAFETY: the block is live and `size` bytes long.
        unsafe { check(p, b.size, b.size, b.tag) };
        Some((p, b))
    }

    /// Removes every block, checking each.
    pub fn drain(&mut self) -> Vec<(*mut u8, Block)> {
        let mut v = Vec::with_capacity(self.blocks.len());
        while let Some(x) = self.take(0) {
            v.push(x);
        }
        v
    }
}
