//! The secure mode (the `secure` cargo feature, off by default): a
//! program's use-after-free write into a free slot, double free, or free of
//! a pointer that is not the start of a slot stops the program with a
//! message instead of corrupting the allocator (see docs/secure.md).
//!
//! A free slot holds two words: at offset 0 its link, stored XOR a tag of
//! the slot's address, and at offset 8 a check that binds the link to the
//! address (slots are at least 16 bytes in this mode). The tag is a keyed
//! mix of the address with two keys drawn from the OS when the reservation
//! is made, so an overwrite that does not know the keys fails the check
//! (with probability 1 - 2^-64), and a free slot's words say nothing of
//! another slot's. Every link read from a free slot is checked before it is
//! followed; a slot whose words pass the check is free, so a second free of
//! it is a double free. A slot handed out gets its check cleared.
//!
//! This is keyed mixing, not a cryptographic MAC: it stops blind and
//! accidental corruption, not an attacker who can read freed memory.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::free_list::BAD_LINK;
use crate::layout;

/// The keys of the tag (0 until the reservation is made).
static KEYS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// The byte freed slots are filled with, `0x100 | byte`; 0: no fill.
static FILL: AtomicU32 = AtomicU32::new(0);

/// Bytes at the start of a free slot that hold its link and check: never
/// filled.
pub const HEADER: usize = 16;

/// Draws the keys and reads `SMALLOC_FREE_FILL`. Called by the thread that
/// makes the reservation, before the reservation is published (which
/// publishes the keys).
pub fn init() {
    let mut keys = [0u64; 2];
    // SAFETY: `keys` is a valid buffer of 16 bytes.
    let got = unsafe { libc::getrandom(keys.as_mut_ptr().cast(), 16, 0) };
    if got != 16 {
        // No getrandom (a kernel before 3.17, a seccomp filter): the clock,
        // the stack and the pid, which still differ between runs.
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let local = 0u8;
        keys[0] = (ts.tv_nsec as u64) << 32 ^ ts.tv_sec as u64 ^ crate::sys::pid() as u64;
        keys[1] = mix(keys[0] ^ core::ptr::from_ref(&local).addr() as u64);
    }
    // Relaxed: published with the reservation's base (its Release store).
    KEYS[0].store(keys[0], Ordering::Relaxed);
    KEYS[1].store(keys[1] | 1, Ordering::Relaxed);
    if let Some(byte) = fill_byte() {
        // Relaxed: as above.
        FILL.store(0x100 | u32::from(byte), Ordering::Relaxed);
    }
}

/// `SMALLOC_FREE_FILL`: a byte, in decimal or `0x` hexadecimal (read with
/// `secure_getenv`, so ignored in secure-execution mode).
fn fill_byte() -> Option<u8> {
    let s = core::str::from_utf8(crate::sys::env(c"SMALLOC_FREE_FILL")?).ok()?;
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A 64-bit mixer (a bijection with good avalanche), for the fallback keys.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

/// The tag of the slot at `addr`: the address times the odd key after XOR
/// with the other, high half folded into the low (a few instructions).
#[inline(always)]
pub fn tag(addr: usize) -> u64 {
    // Relaxed: written once before the reservation was published, which
    // every caller has seen (it holds a slot).
    let (k0, k1) = (
        KEYS[0].load(Ordering::Relaxed),
        KEYS[1].load(Ordering::Relaxed),
    );
    let t = (addr as u64 ^ k0).wrapping_mul(k1);
    t ^ (t >> 32)
}

/// The check word of a free slot of tag `tag` that holds `link`.
#[inline(always)]
fn check_of(tag: u64, link: u32) -> u64 {
    tag.rotate_left(32).wrapping_add(u64::from(link))
}

/// The words a free slot of tag `tag` holding `link` stores: the encoded
/// link and the check.
#[inline(always)]
pub fn seal(tag: u64, link: u32) -> (u32, u64) {
    (link ^ tag as u32, check_of(tag, link))
}

/// The link that the words of a free slot of tag `tag` hold, if its check
/// holds (else the slot was written after it was freed, or is not free).
#[inline(always)]
pub fn open(tag: u64, word: u32, check: u64) -> Option<u32> {
    let link = word ^ tag as u32;
    (check == check_of(tag, link)).then_some(link)
}

/// [`open`] for the slot at `addr`, [`BAD_LINK`] when the check fails.
#[inline(always)]
pub fn decode(addr: usize, word: u32, check: u64) -> u32 {
    open(tag(addr), word, check).unwrap_or(BAD_LINK)
}

/// The check word cell of the slot at `addr`.
#[inline(always)]
pub fn check_cell(addr: usize) -> &'static AtomicU64 {
    // SAFETY: `addr + 8` lies inside a slot of at least 16 bytes (MIN_SC in
    // this mode), 8-byte aligned, in the never-unmapped reservation; while
    // the slot is free it is accessed atomically (a stale reader of the
    // shared list may read it while the slot is reused, as with the link).
    unsafe { &*crate::sys::ptr_at::<AtomicU64>(addr + 8) }
}

/// The slot at `addr` is handed out: its check is cleared, so that the
/// program's data can never pass for a free slot's words.
#[inline(always)]
pub fn handed_out(addr: usize) {
    // Relaxed: the slot is ours; its next free writes it again.
    check_cell(addr).store(0, Ordering::Relaxed);
}

/// The slot at `addr`, of size class `sc`, is about to be freed: stops the
/// program if `addr` is not the start of a slot, or if the slot is free
/// already (its words pass the check: a double free). Returns its tag, for
/// the push.
#[inline(always)]
pub fn check_free(addr: usize, sc: u32) -> u64 {
    if !(layout::MIN_SC..=layout::MAX_SC).contains(&sc) || !layout::is_slot_start(addr, sc) {
        fail("free of a pointer that is not the start of a block", addr);
    }
    // Relaxed: a slot the caller is freeing is the caller's, or free (a
    // double free), in which case its words were written by a free that
    // this thread's program order or synchronization placed before.
    let word = crate::metadata::link_cell(addr).load(Ordering::Relaxed);
    let check = check_cell(addr).load(Ordering::Relaxed);
    let t = tag(addr);
    if open(t, word, check).is_some() {
        fail("double free", addr);
    }
    t
}

/// Whether freed slots are filled (`SMALLOC_FREE_FILL`): then the hot path
/// of free leaves every free to the cold path, which fills.
#[inline(always)]
pub fn filling() -> bool {
    // Relaxed: a setting.
    FILL.load(Ordering::Relaxed) != 0
}

/// With `SMALLOC_FREE_FILL`, fills the slot at `addr` (of size class `sc`,
/// being freed) past its first [`HEADER`] bytes, up to the size from which
/// freed slots give their pages back (they read as zero then).
#[cold]
#[inline(never)]
pub fn fill(addr: usize, sc: u32) {
    // Relaxed: a setting.
    let fill = FILL.load(Ordering::Relaxed);
    if fill == 0 || sc >= crate::layout::RELEASE_SC {
        return;
    }
    let byte = fill as u8;
    // SAFETY: the slot is the caller's (being freed); its bytes past the
    // header are not read by the allocator.
    unsafe {
        core::ptr::write_bytes(
            crate::sys::ptr_at::<u8>(addr + HEADER),
            byte,
            crate::layout::slot_size(sc) - HEADER,
        )
    };
}

/// Stops the program: writes `smalloc: <what> at <addr>` to stderr and
/// aborts. Allocates nothing.
#[cold]
#[inline(never)]
pub fn fail(what: &str, addr: usize) -> ! {
    // Under cargo-fuzz (--cfg fuzzing) a panic, which the `secure` fuzz target catches.
    if cfg!(fuzzing) {
        panic!("smalloc: {what} at {addr:#018x} (detected by the secure mode)");
    }
    let mut line = [0u8; 160];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if n < line.len() {
                line[n] = b;
                n += 1;
            }
        }
    };
    put(b"smalloc: ");
    put(what.as_bytes());
    put(b" at 0x");
    let mut hex = [0u8; 16];
    for (i, h) in hex.iter_mut().enumerate() {
        let d = (addr >> (60 - 4 * i)) & 0xf;
        *h = b"0123456789abcdef"[d];
    }
    put(&hex);
    put(b" (detected by the secure mode; aborting)\n");
    // SAFETY: writes our own buffer to stderr; abort never returns.
    unsafe {
        libc::write(2, line.as_ptr().cast(), n);
        libc::abort()
    }
}
