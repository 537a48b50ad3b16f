//! Rust side of the thread-local-state probe (see `run.sh`, `docs/tls.md`).
//!
//! Compiled twice: as a module of the driver executable (`--cfg place="exe"`)
//! and as a cdylib that the driver dlopens (`place="dl"`) or that is
//! LD_PRELOADed (`place="pre"`). Every scheme has a never-inlined `*_read`
//! (one access) and `*_rw` (read, then write back the value plus one), and an
//! exported loop `tp_<place>_rs_<scheme>_<op>(n)` that calls it `n` times, so
//! each access costs what one allocator call would pay: the thread-local
//! address cannot be hoisted out of a loop by the compiler.
//!
//! Schemes:
//! * `base`: a plain global (not thread-local): call + loop overhead only.
//! * `ie`: smalloc's scheme, a `.tbss` word from `global_asm!`, initial-exec.
//! * `std`: `thread_local!` with `const` init around a `Cell<usize>`.
//! * `pth`: smalloc's portable fallback, a lazily created pthread key.
//! * `tp`: read the thread pointer and hash it (read only, nothing stored).
#![allow(dead_code)]

use core::arch::{asm, global_asm};
use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Slab count the `tp` hash maps onto (smalloc has `1 << SLAB_BITS` = 16).
const SLAB_BITS: u32 = 4;

/// Keeps the compiler from moving a call across it (or merging two calls).
#[inline(always)]
fn barrier() {
    // SAFETY: an empty template; with default options it only tells the
    // compiler memory may have changed.
    unsafe { asm!("", options(nostack, preserves_flags)) };
}

// ---- base -----------------------------------------------------------------

static PLAIN: AtomicUsize = AtomicUsize::new(0);

#[inline(never)]
fn base_read() -> usize {
    PLAIN.load(Ordering::Relaxed)
}

#[inline(never)]
fn base_rw() -> usize {
    let v = PLAIN.load(Ordering::Relaxed);
    PLAIN.store(v + 1, Ordering::Relaxed);
    v
}

// ---- ie: global_asm! .tbss word, initial-exec ------------------------------

global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl __tp_ie_word",
    ".hidden __tp_ie_word",
    ".type __tp_ie_word,@object",
    ".size __tp_ie_word,8",
    "__tp_ie_word:",
    ".zero 8",
    ".popsection",
);

#[inline(always)]
fn ie_load() -> usize {
    let v: usize;
    // SAFETY: initial-exec load of our own 8-byte .tbss word: the GOT slot
    // holds its offset from the thread pointer, which `fs:` points at.
    unsafe {
        asm!(
            "mov {v}, qword ptr [rip + __tp_ie_word@GOTTPOFF]",
            "mov {v}, qword ptr fs:[{v}]",
            v = out(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v
}

#[inline(always)]
fn ie_store(v: usize) {
    // SAFETY: as in `ie_load`; writes only this thread's copy of the word.
    unsafe {
        asm!(
            "mov {off}, qword ptr [rip + __tp_ie_word@GOTTPOFF]",
            "mov qword ptr fs:[{off}], {v}",
            off = out(reg) _,
            v = in(reg) v,
            options(nostack, preserves_flags),
        );
    }
}

#[inline(never)]
fn ie_read() -> usize {
    ie_load()
}

#[inline(never)]
fn ie_rw() -> usize {
    let v = ie_load();
    ie_store(v + 1);
    v
}

// ---- std: thread_local! with const init ------------------------------------

thread_local! {
    static STD_WORD: Cell<usize> = const { Cell::new(0) };
}

#[inline(never)]
fn std_read() -> usize {
    STD_WORD.get()
}

#[inline(never)]
fn std_rw() -> usize {
    let v = STD_WORD.get();
    STD_WORD.set(v + 1);
    v
}

// ---- pth: pthread key, created on first use (smalloc's fallback) ----------

unsafe extern "C" {
    fn pthread_key_create(key: *mut u32, dtor: Option<unsafe extern "C" fn(*mut c_void)>) -> i32;
    fn pthread_key_delete(key: u32) -> i32;
    fn pthread_getspecific(key: u32) -> *mut c_void;
    fn pthread_setspecific(key: u32, value: *const c_void) -> i32;
}

/// The key plus one; 0 while not created.
static KEY: AtomicUsize = AtomicUsize::new(0);

#[inline(always)]
fn key() -> u32 {
    let k = KEY.load(Ordering::Acquire);
    if k != 0 {
        return (k - 1) as u32;
    }
    key_slow()
}

#[cold]
#[inline(never)]
fn key_slow() -> u32 {
    let mut new = 0u32;
    // SAFETY: `new` is a valid out-pointer; no destructor.
    if unsafe { pthread_key_create(&mut new, None) } != 0 {
        return u32::MAX;
    }
    match KEY.compare_exchange(0, new as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => new,
        Err(winner) => {
            // SAFETY: `new` was created just above and never handed out.
            unsafe { pthread_key_delete(new) };
            (winner - 1) as u32
        }
    }
}

#[inline(never)]
fn pth_read() -> usize {
    // SAFETY: getspecific has no preconditions; a bad key yields null.
    unsafe { pthread_getspecific(key()) }.addr()
}

#[inline(never)]
fn pth_rw() -> usize {
    let k = key();
    // SAFETY: as in `pth_read`.
    let v = unsafe { pthread_getspecific(k) }.addr();
    // SAFETY: the value is an integer in pointer clothing, never dereferenced.
    unsafe { pthread_setspecific(k, core::ptr::without_provenance(v + 1)) };
    v
}

// ---- tp: hash of the thread pointer, no memory of its own ------------------

#[inline(never)]
fn tp_read() -> usize {
    let t: usize;
    // SAFETY: on x86-64 Linux `fs:0` holds the thread pointer itself (the
    // TCB's self pointer); reading it touches only this thread's TCB.
    unsafe {
        asm!(
            "mov {t}, qword ptr fs:[0]",
            t = out(reg) t,
            options(nostack, readonly, preserves_flags),
        );
    }
    // Fibonacci hash: the top SLAB_BITS bits of t * 2^64/phi.
    t.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - SLAB_BITS)
}

// ---- exported loops ---------------------------------------------------------

macro_rules! loops {
    ($place:literal: $($scheme:ident $op:ident: $access:ident => $f:ident),* $(,)?) => {$(
        #[unsafe(export_name = concat!("tp_", $place, "_rs_", stringify!($scheme), "_", stringify!($op)))]
        #[inline(never)]
        pub extern "C" fn $f(n: u64) -> u64 {
            let mut sum = 0u64;
            for _ in 0..n {
                barrier();
                sum = sum.wrapping_add($access() as u64);
            }
            sum
        }
    )*};
}

macro_rules! all_loops {
    ($place:literal) => {
        loops!($place:
            base read: base_read => loop_base_read,
            base rw: base_rw => loop_base_rw,
            ie read: ie_read => loop_ie_read,
            ie rw: ie_rw => loop_ie_rw,
            std read: std_read => loop_std_read,
            std rw: std_rw => loop_std_rw,
            pth read: pth_read => loop_pth_read,
            pth rw: pth_rw => loop_pth_rw,
            tp read: tp_read => loop_tp_read,
        );
    };
}

#[cfg(place = "exe")]
all_loops!("exe");
#[cfg(place = "dl")]
all_loops!("dl");
#[cfg(place = "pre")]
all_loops!("pre");
