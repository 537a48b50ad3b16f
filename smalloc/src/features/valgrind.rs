//! Describing smalloc's blocks to valgrind's memcheck (the `valgrind`
//! feature): memcheck replaces glibc's `malloc`, not smalloc's, so without
//! this it sees one big mapping and reports no leak, no use after free and
//! no read of uninitialised heap memory.
//!
//! * Every block handed out is a malloc-like block of its requested size;
//!   every block freed a free-like one. The rest of its slot, and every
//!   free or never-used slot, is no-access, so a read or write there is an
//!   error, as past a glibc block.
//! * The allocator's own reads and writes of links in free slots are made
//!   with the thread's error reporting off (they touch no-access memory by
//!   design), and a link read is marked defined.
//! * A free of a pointer that is not a live block (a double free, an
//!   interior pointer) is reported by memcheck ("Invalid free()") and then
//!   ignored, as memcheck's own `free` does, instead of corrupting a list.
//! * Under valgrind, freed slots wait in a quarantine of [`QUARANTINE`]
//!   blocks before they go back to their lists, so that a use soon after
//!   free finds no-access memory rather than the next block of that size
//!   (memcheck's own allocator keeps 20 MB of freed blocks for the same
//!   reason).
//!
//! The requests are valgrind's client-request instruction sequence, which
//! does nothing on a real CPU; outside valgrind (asked once) none is made, and the feature's library differs from the
//! default one only by its geometry and a test per allocation and free. The
//! requests' numbers are valgrind's ABI (valgrind.h, memcheck.h).

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::layout::{self, MIN_SC, NUM_SLABS};
use crate::metadata;

/// valgrind's request numbers (valgrind.h).
const RUNNING_ON_VALGRIND: usize = 0x1001;
const MALLOCLIKE_BLOCK: usize = 0x1301;
const FREELIKE_BLOCK: usize = 0x1302;
const RESIZEINPLACE_BLOCK: usize = 0x130b;
const CHANGE_ERR_DISABLEMENT: usize = 0x1801;
/// memcheck's request numbers (memcheck.h): its tool base, then in order.
const MC_BASE: usize = ((b'M' as usize) << 24) | ((b'C' as usize) << 16);
const MAKE_MEM_NOACCESS: usize = MC_BASE;
const MAKE_MEM_DEFINED: usize = MC_BASE + 2;
const CHECK_MEM_IS_ADDRESSABLE: usize = MC_BASE + 4;

/// Freed blocks held back from reuse.
pub const QUARANTINE: usize = 1024;

/// Whether the process runs under valgrind: [`UNKNOWN`] until first asked,
/// then [`NO`] or [`YES`]; so that outside valgrind the feature's library
/// makes no requests and frees on the hot path.
static ACTIVE: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

/// Whether the process runs under valgrind.
#[inline(always)]
pub fn active() -> bool {
    // Relaxed: every thread that asks stores the same answer.
    match ACTIVE.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => ask(),
    }
}

/// Asks valgrind whether it runs the process.
#[cold]
fn ask() -> bool {
    let yes = raw_request(RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0) != 0;
    // Relaxed: as in `active`.
    ACTIVE.store(if yes { YES } else { NO }, Ordering::Relaxed);
    yes
}

/// Sends a client request under valgrind; returns `default` otherwise.
#[inline(always)]
fn request(code: usize, a1: usize, a2: usize, a3: usize, a4: usize, default: usize) -> usize {
    if !active() {
        return default;
    }
    raw_request(code, a1, a2, a3, a4, default)
}

/// Sends a client request; returns `default` when not under valgrind.
#[inline(always)]
fn raw_request(code: usize, a1: usize, a2: usize, a3: usize, a4: usize, default: usize) -> usize {
    let args = [code, a1, a2, a3, a4, 0];
    let result;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: on a real CPU the four rotations of rdi add up to 128 bits
    // (rdi is unchanged) and `xchg rbx, rbx` does nothing; valgrind
    // recognises the sequence, reads the six words at rax and writes its
    // answer to rdx. `args` lives across the block; it may read memory.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") default => result,
            inout("rdi") 0usize => _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: on a real CPU the four rotations of x12 add up to 128 bits
    // (x12 is unchanged) and `orr x10, x10, x10` does nothing; valgrind
    // recognises the sequence, reads the six words at x4 and writes its
    // answer to x3. `args` lives across the block; it may read memory.
    unsafe {
        core::arch::asm!(
            "ror x12, x12, #3",
            "ror x12, x12, #13",
            "ror x12, x12, #51",
            "ror x12, x12, #61",
            "orr x10, x10, x10",
            in("x4") args.as_ptr(),
            inout("x3") default => result,
            options(nostack),
        );
    }
    result
}

/// Runs `f` with this thread's error reporting off: the allocator touching
/// its own links in no-access free slots.
#[inline(always)]
pub fn quiet<T>(f: impl FnOnce() -> T) -> T {
    request(CHANGE_ERR_DISABLEMENT, 1, 0, 0, 0, 0);
    let r = f();
    request(CHANGE_ERR_DISABLEMENT, usize::MAX, 0, 0, 0, 0);
    r
}

/// `word` as a defined value (a link read from a no-access slot, or a
/// stale read of a live block's first bytes, whose compare-and-swap fails).
#[inline(always)]
pub fn defined_word(word: u32) -> u32 {
    let w = word;
    request(MAKE_MEM_DEFINED, (&raw const w).addr(), 4, 0, 0, 0);
    // SAFETY: reads our own local (through a volatile read, so the marking
    // above is not reordered past it).
    unsafe { core::ptr::read_volatile(&raw const w) }
}

/// The block at `p`, of `size` bytes, was handed out (its contents
/// undefined).
#[inline(always)]
pub fn allocated(p: *mut u8, size: usize) {
    if !p.is_null() {
        request(MALLOCLIKE_BLOCK, p.addr(), size.max(1), 0, 0, 0);
    }
}

/// The `size` bytes at `p` now hold defined values (zeroed by the
/// allocator or by the kernel).
#[inline(always)]
pub fn defined(p: *mut u8, size: usize) {
    if !p.is_null() {
        request(MAKE_MEM_DEFINED, p.addr(), size, 0, 0, 0);
    }
}

/// The `size` bytes at `addr` are no-access.
pub fn no_access(addr: usize, size: usize) {
    request(MAKE_MEM_NOACCESS, addr, size, 0, 0, 0);
}

/// Whether the byte at `addr` is addressable (part of a live block).
fn addressable(addr: usize) -> bool {
    quiet(|| request(CHECK_MEM_IS_ADDRESSABLE, addr, 1, 0, 0, 0)) == 0
}

/// The requested size of the live block at the start of the slot at `p`
/// (the C front end does not know it): the block is addressable, the rest
/// of its slot is not. `None` outside valgrind.
pub fn block_size(p: *const u8) -> Option<usize> {
    block_size_within(p, layout::slot_size(layout::sc_of(p.addr())))
}

/// The size of the live block at `p`, which the `room` bytes from `p`
/// hold: its addressable start. `None` outside valgrind.
pub fn block_size_within(p: *const u8, room: usize) -> Option<usize> {
    if !active() {
        return None;
    }
    let slot = room;
    // The first no-access byte, by bisection: [0, lo) addressable.
    let (mut lo, mut hi) = (1usize, slot);
    if addressable(p.addr() + slot - 1) {
        return Some(slot);
    }
    while lo < hi - 1 {
        let mid = lo + (hi - lo) / 2;
        if addressable(p.addr() + mid - 1) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// The block at `p` now holds `new_size` bytes, in place (`old_size` if
/// the front end knows it).
pub fn resized(p: *mut u8, old_size: Option<usize>, new_size: usize) {
    resized_within(
        p,
        old_size,
        new_size,
        layout::slot_size(layout::sc_of(p.addr())),
    );
}

/// How many bytes of the block at `p` a move keeps: `keep`, or less when
/// the front end did not know the block's size and valgrind does.
pub fn copy_len(p: *const u8, old_size: Option<usize>, keep: usize) -> usize {
    match old_size {
        Some(_) => keep,
        None => block_size(p).map_or(keep, |n| n.min(keep)),
    }
}

/// The slot at `p` is being freed: tells memcheck, which reports a pointer
/// that is not a live block. Returns the slot to push now, if any: `p`
/// waits in the quarantine, and the slot it pushes out (or none) goes back
/// to its list; a pointer that is not a live block, none.
pub fn freed(p: *mut u8) -> Option<*mut u8> {
    // Outside valgrind, no quarantine: frees as the default build does.
    if !active() {
        return Some(p);
    }
    let addr = p.addr();
    let sc = layout::sc_of(addr);
    let live = (MIN_SC..=layout::MAX_SC).contains(&sc)
        && layout::is_slot_start(addr, sc)
        && addressable(addr);
    request(FREELIKE_BLOCK, addr, 0, 0, 0, 0);
    if !live {
        return None;
    }
    // Relaxed: the entries are exchanged whole; the slot's contents are not
    // read by whoever pushes it out (its link is written after).
    let i = NEXT.fetch_add(1, Ordering::Relaxed) % QUARANTINE;
    let out = HELD[i].swap(addr, Ordering::AcqRel);
    (out != 0).then(|| crate::sys::ptr_at(out))
}

/// Next quarantine entry to take.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Freed slots held back, by address (0: none).
static HELD: [AtomicUsize; QUARANTINE] = [const { AtomicUsize::new(0) }; QUARANTINE];

/// The reservation at `base` was just mapped (memcheck marks a new mapping
/// defined): no-access but for the slabs' metadata, so a stray pointer into
/// a slot nobody holds is an error and the leak check scans little.
pub fn reserved(base: usize) {
    no_access(base, layout::TOTAL_SIZE);
    for slab in 0..NUM_SLABS {
        let slab_addr = layout::slab_addr(base, slab);
        request(MAKE_MEM_DEFINED, slab_addr, METADATA, 0, 0, 0);
        request(
            MAKE_MEM_DEFINED,
            metadata::private_block(slab_addr),
            METADATA,
            0,
            0,
            0,
        );
    }
}

/// The big block at `block` of `size` bytes was mapped in `[start, start +
/// len)`: the mapping is no-access but for the block, which the kernel
/// zeroed, and the `below` bytes under it (a front end's header).
pub fn big_mapped(start: usize, len: usize, block: usize, size: usize, below: usize) {
    no_access(start, len);
    request(MAKE_MEM_DEFINED, block - below, below, 0, 0, 0);
    request(MALLOCLIKE_BLOCK, block, size, 0, 1, 0);
}

/// The big block at `p` is being unmapped.
pub fn big_freed(p: *mut u8) {
    request(FREELIKE_BLOCK, p.addr(), 0, 0, 0, 0);
}

/// The big block at `p` of `old_size` bytes is now at `q` (null: the move
/// failed, `p` is unchanged) with `new_size`. A block that moved (by
/// `mremap`) is described anew as defined: memcheck's copy of the pages'
/// state is not kept.
pub fn big_moved(p: *mut u8, q: *mut u8, old_size: usize, new_size: usize) {
    if q == p {
        resized_within(p, Some(old_size), new_size, 0);
    } else if !q.is_null() {
        request(FREELIKE_BLOCK, p.addr(), 0, 0, 0, 0);
        request(MALLOCLIKE_BLOCK, q.addr(), new_size, 0, 1, 0);
    }
}

/// The block at `p` (`old_size` bytes, if known; else within the `room`
/// bytes from `p`) now holds `new_size` bytes in place.
pub fn resized_within(p: *mut u8, old_size: Option<usize>, new_size: usize, room: usize) {
    if let Some(old) = old_size.or_else(|| block_size_within(p, room)) {
        if old != new_size {
            request(RESIZEINPLACE_BLOCK, p.addr(), old, new_size, 0, 0);
        }
    }
}

/// Bytes from a slab's address, and from its private block, that hold its
/// metadata.
const METADATA: usize = 1 << 20;
const _: () = assert!(metadata::METADATA[0].1 <= METADATA);
const _: () = assert!(metadata::METADATA[1].1 - metadata::PRIVATE_OFFSET <= METADATA);
