//! The part of the fuzz targets shared by all: decoding the fuzzer's bytes
//! into operations, and the model of live blocks that checks every result;
//! and the checked operations that the `GlobalAlloc` targets (`global_alloc`
//! and `threads`) share.
//!
//! Every block is filled with a pattern derived from a unique tag when it is
//! handed out and checked before it is freed or reallocated; the shadow
//! model (from devutils) rejects a misaligned block or one that overlaps a
//! live block.
#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::{GlobalAlloc, Layout};

use devutils::{Block, Shadow, pattern};
use smalloc_core::Smalloc;
use smalloc_core::layout::{MAX_SC, size_class};

/// Bytes at each end of a block that get the fill pattern (and are
/// checked); in between, at most [`SAMPLES`] bytes spread over the block
/// (two in a block above [`SPARSE`]). The allocator writes only the start of
/// a free slot (its link, and the check of the secure mode), so a write of
/// its into a live block lands in the head; an overlap of two live blocks is
/// the shadow model's to find.
pub const EDGE: usize = 16;
/// Most sampled bytes between a block's head and tail.
pub const SAMPLES: usize = 8;
/// Blocks above this size get only two samples in between: each sample of
/// a fresh mapping is a page fault, and one far from the others a new page
/// table too.
pub const SPARSE: usize = 1 << 20;
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
/// Most blocks per run that are mappings of their own (huge or aligned past
/// the largest slot): each costs an `mmap`, page faults with new page
/// tables and a `munmap`, tens of microseconds, so a run full of them would
/// be as slow as fifty ordinary ones.
pub const MAX_MAPPINGS: usize = 2;

/// Most blocks per run of the few-slot size classes (above 64 MiB, or so
/// aligned; from 1 GiB on a class has 2 to 4 slots per slab, 32 to 64 in
/// all): fewer than any such class holds, so that a request that fits a
/// slot always gets one (past that it would get a mapping of its own),
/// also with the threads target's four threads.
pub const MAX_WIDE: usize = 4;

/// Whether a block of `size` bytes aligned to `align` takes a slot of a
/// few-slot size class ([`MAX_WIDE`]).
pub fn is_wide(size: usize, align: usize) -> bool {
    size.max(align) > 64 << 20 && !is_mapping(size, align)
}

/// Whether a block of `size` bytes aligned to `align` is a mapping of its
/// own rather than a slot (past the largest slot, 2 GiB).
pub fn is_mapping(size: usize, align: usize) -> bool {
    size.max(align) > 1 << 31
}

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

    /// A size, mostly small: the first byte picks a band
    /// `2^(k-1) < size <= 2^k` (`k < 22` names band `k` itself, up to 2 MiB,
    /// so every size class stays one byte away; any other byte but the two
    /// below gives a band up to 4 KiB), then two bytes a position inside it,
    /// biased towards the band's edges. `0xff` is a huge size, `0xfe` zero
    /// when `allow_zero`. Random bytes give a band above 4 KiB one time in
    /// 28 and a huge size one in 256, so most executions stay cheap.
    pub fn size(&mut self, allow_zero: bool) -> Option<usize> {
        let k = self.byte()?;
        let pos = self.u16()?;
        if k == 0xff {
            return Some(HUGE + (pos as usize) * 4096);
        }
        if allow_zero && k == 0xfe {
            return Some(0);
        }
        let k = if k < 22 { k } else { k % 13 } as u32;
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

    /// An alignment: mostly 1 to 16; one byte in eight names one of 2^2 to
    /// 2^33 (2^23..2^31 with a small size reach the top size classes, past
    /// the largest slot's 2^31 it is a big over-aligned mapping).
    pub fn align(&mut self) -> Option<usize> {
        let a = self.byte()?;
        Some(if a < 224 {
            1 << (a % 5)
        } else {
            1 << (a - 222)
        })
    }
}

/// The pattern of `tag` at offsets `start..start + EDGE`.
#[inline(always)]
fn pattern_at(tag: u64, start: usize) -> [u8; EDGE] {
    core::array::from_fn(|i| pattern(tag, start + i))
}

/// The parts of a block of `size` bytes that get the fill pattern: its
/// first and last [`EDGE`] bytes (the same bytes when it is small), and the
/// offsets of a few bytes evenly spaced in between. Fixed counts, so the
/// fuzzer's instrumentation of these loops costs next to nothing.
fn touched(size: usize) -> ([(usize, usize); 2], [usize; SAMPLES]) {
    let edges = [(0, size.min(EDGE)), (size.saturating_sub(EDGE), size)];
    // Blocks above SPARSE: two samples, each repeated.
    let parts = if size > SPARSE { 3 } else { SAMPLES + 1 };
    let samples = core::array::from_fn(|j| {
        let j = if size > SPARSE { j % 2 } else { j };
        (j + 1) * size / parts
    });
    (edges, samples)
}

/// Writes the pattern of `tag` into a block.
///
/// # Safety
/// `p..p+size` is writable and owned by the caller.
pub unsafe fn fill(p: *mut u8, size: usize, tag: u64) {
    let (edges, samples) = touched(size);
    for (start, end) in edges {
        let pat = pattern_at(tag, start);
        // SAFETY: `start <= end <= size` and `end - start <= EDGE`.
        unsafe { core::ptr::copy_nonoverlapping(pat.as_ptr(), p.add(start), end - start) };
    }
    for i in samples {
        if i < size {
            // SAFETY: `i < size`.
            unsafe { p.add(i).write(pattern(tag, i)) };
        }
    }
}

/// Checks the pattern of `tag` of a block of `size` bytes, at the offsets
/// below `upto` (what a reallocation kept); panics on a difference.
///
/// # Safety
/// `p..p+upto` is readable.
pub unsafe fn check(p: *const u8, size: usize, upto: usize, tag: u64) {
    let (edges, samples) = touched(size);
    for (start, end) in edges {
        let end = end.min(upto);
        if start < end {
            let pat = pattern_at(tag, start);
            // SAFETY: `start < end <= upto`.
            let got = unsafe { core::slice::from_raw_parts(p.add(start), end - start) };
            if got != &pat[..end - start] {
                corrupted(p, size, tag, start, got, &pat);
            }
        }
    }
    for i in samples {
        if i < upto.min(size) {
            // SAFETY: `i < upto`.
            let got = unsafe { core::slice::from_raw_parts(p.add(i), 1) };
            if got[0] != pattern(tag, i) {
                corrupted(p, size, tag, i, got, &[pattern(tag, i)]);
            }
        }
    }
}

/// Reports a block whose bytes at `start` are `got` instead of `want`.
#[cold]
#[inline(never)]
fn corrupted(p: *const u8, size: usize, tag: u64, start: usize, got: &[u8], want: &[u8]) -> ! {
    let i = start + got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
    panic!(
        "block {p:p} (size {size}, tag {tag:#x}) corrupted at offset {i}: \
         {got:02x?} instead of {want:02x?} from offset {start}"
    );
}

/// Checks that a block reads as zero where [`fill`] would write.
///
/// # Safety
/// `p..p+size` is readable.
pub unsafe fn check_zero(p: *const u8, size: usize) {
    let (edges, samples) = touched(size);
    for (start, end) in edges {
        // SAFETY: `start <= end <= size`.
        let got = unsafe { core::slice::from_raw_parts(p.add(start), end - start) };
        assert!(
            got.iter().all(|&b| b == 0),
            "zeroed block {p:p} (size {size}) has {got:02x?} at {start}"
        );
    }
    for i in samples {
        if i < size {
            // SAFETY: `i < size`.
            let got = unsafe { p.add(i).read() };
            assert_eq!(
                got, 0,
                "zeroed block {p:p} (size {size}) has {got:#x} at {i}"
            );
        }
    }
}

/// Most bytes a reallocation of a huge or over-aligned block may keep: such
/// a block moves by copying when it becomes a slot (or changes alignment),
/// and copying megabytes of a mapping's fresh pages costs milliseconds.
pub const MAX_MAPPING_COPY: usize = 16 * 1024;

/// The size to realloc block `b` to, given the input's `new_size`: a huge
/// page-aligned block may stay huge (`mremap`, no copy); otherwise the copy
/// out of a huge or over-aligned block is kept small.
pub fn realloc_size(b: &Block, new_size: usize) -> usize {
    if b.size >= HUGE && b.align <= 4096 && new_size >= HUGE {
        new_size
    } else if b.size >= HUGE || b.align > 4096 {
        new_size.min(MAX_MAPPING_COPY)
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
    mappings: usize,
    wide: usize,
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

    /// Whether a block of `size` more bytes aligned to `align` fits the
    /// bounds.
    pub fn has_room(&self, size: usize, align: usize) -> bool {
        self.blocks.len() < MAX_LIVE
            && if is_mapping(size, align) {
                self.mappings < MAX_MAPPINGS
            } else {
                self.bytes + size <= MAX_LIVE_BYTES
                    && (!is_wide(size, align) || self.wide < MAX_WIDE)
            }
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
        if is_mapping(size, align) {
            self.mappings += 1;
        }
        if is_wide(size, align) {
            self.wide += 1;
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

/// The slot-or-mapping invariant of a live block of `a`: a request that fits
/// a slot got a slot, one that does not a mapping; and the block's usable
/// size is at least its size.
///
/// # Safety
/// `p` is a live block of `a` with layout `l`.
pub unsafe fn check_home(a: &Smalloc, p: *mut u8, l: Layout) {
    let slot = size_class(l.size(), l.align()) <= MAX_SC;
    assert_eq!(a.owns_slot(p), slot, "{l:?} at {p:p}");
    // SAFETY: per the contract.
    assert!(unsafe { a.usable_size(p, l) } >= l.size());
}

/// The realloc operation of the `GlobalAlloc` targets: takes the live block
/// chosen by `pick` (checking its contents), then reallocates it with `a`
/// to `new_size` (as [`realloc_size`] bounds it) or, when the new size
/// would not fit [`Live`]'s bounds, frees it. A reallocated block must be
/// non-null, keep the old contents up to `min(old, new)` bytes, pass
/// [`check_home`] and, recorded anew (with a fresh fill), the shadow
/// model's alignment and overlap checks.
///
/// # Safety
/// Every block of `live` is a live block of `a` with the size and alignment
/// recorded for it; `new_size` is not zero.
pub unsafe fn realloc_block(a: &Smalloc, live: &mut Live, pick: u8, new_size: usize) {
    let Some((p, b)) = live.take(pick) else {
        return;
    };
    let new_size = realloc_size(&b, new_size);
    let l = Layout::from_size_align(b.size, b.align).unwrap();
    if !live.has_room(new_size, b.align) {
        // SAFETY: `p` is live with layout `l` (the contract), and no longer
        // in `live`.
        unsafe { a.dealloc(p, l) };
        return;
    }
    // A valid layout: `new_size` rounded to the alignment does not overflow.
    let nl = Layout::from_size_align(new_size, b.align).unwrap();
    // SAFETY: `p` is live with layout `l` (the contract), and no longer in
    // `live`; `new_size` is non-zero (the contract) and does not overflow
    // when rounded to `l.align()` (`nl` is valid).
    let q = unsafe { a.realloc(p, l, new_size) };
    assert!(!q.is_null(), "realloc {l:?} to {new_size} failed");
    // SAFETY: `q` holds `min(old, new)` bytes of the old block.
    unsafe { check(q, b.size, b.size.min(new_size), b.tag) };
    // SAFETY: `q` is a live block of `a` with layout `nl`.
    unsafe { check_home(a, q, nl) };
    // SAFETY: `q` is handed out to us now.
    unsafe { live.add(q, new_size, b.align) };
}
