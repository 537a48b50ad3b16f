//! The call stack of a sample, as return addresses, taken without
//! allocating: by frame pointers (the default; the program must be built
//! with them, `-C force-frame-pointers=yes` or `-fno-omit-frame-pointer`),
//! or by the DWARF unwinder of libgcc (`_Unwind_Backtrace`: slower, works
//! without frame pointers; it may allocate on first use, which the caller's
//! re-entrancy guard keeps out of the profile).

use core::ffi::c_void;
use core::mem::MaybeUninit;

use super::MAX_FRAMES;
use crate::home_slab::profile_words::STACK_TOP;
use crate::home_slab::{profile_word, set_profile_word};

/// Room for a stack's return addresses, left unwritten until a walk fills
/// it (zeroing it would cost a tenth of a sample).
pub struct Frames {
    buf: [MaybeUninit<usize>; MAX_FRAMES],
    len: usize,
    /// The frames folded by [`fold`], as the walk went.
    folded: u64,
}

/// Folds a return address into a stack's running hash: a rotation and an
/// XOR, two cycles per frame that the walk's chain of loads hides (a
/// multiply per frame, after the walk, was a fifth of a sample);
/// [`Frames::key`] mixes the result once.
#[inline(always)]
fn fold(h: u64, ip: usize) -> u64 {
    h.rotate_left(19) ^ ip as u64
}

impl Frames {
    /// No frames yet.
    #[inline(always)]
    pub fn new() -> Frames {
        Frames {
            // SAFETY: an array of `MaybeUninit` needs no initialization.
            buf: unsafe { MaybeUninit::uninit().assume_init() },
            len: 0,
            folded: 0,
        }
    }

    /// Adds a frame; false (and nothing added) when full.
    #[inline(always)]
    fn push(&mut self, ip: usize) -> bool {
        let Some(cell) = self.buf.get_mut(self.len) else {
            return false;
        };
        cell.write(ip);
        self.len += 1;
        self.folded = fold(self.folded, ip);
        true
    }

    /// The stack's key in the stack table: a hash of its frames, never 0.
    pub fn key(&self) -> u64 {
        // The finalizer of MurmurHash3: every bit of the folded frames and
        // the depth moves every bit of the key.
        let mut h = self.folded ^ (self.len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        h | 1
    }

    /// The frames, innermost first.
    pub fn get(&self) -> &[usize] {
        // SAFETY: the first `len` cells were written by `push`.
        unsafe { core::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len) }
    }
}

/// How stacks are walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwind {
    /// Follow the frame-pointer chain (fast; needs frame pointers).
    FramePointers,
    /// libgcc's DWARF unwinder (slower; needs only unwind tables).
    Dwarf,
}

/// Fills `out` with the return addresses of the callers, innermost first.
#[inline(never)]
pub fn capture(how: Unwind, out: &mut Frames) {
    match how {
        Unwind::FramePointers => frame_pointers(out),
        Unwind::Dwarf => dwarf(out),
    }
}

/// The top (highest address) of the calling thread's stack, found once.
fn stack_top() -> usize {
    let top = profile_word::<STACK_TOP>();
    if top != 0 {
        return top;
    }
    let mut attr = core::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let (mut addr, mut size) = (core::ptr::null_mut(), 0);
    // SAFETY: `attr` is initialized by pthread_getattr_np before it is read
    // and destroyed after; the out-pointers are valid.
    let top = unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return 0;
        }
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        if ok { addr.addr() + size } else { 0 }
    };
    set_profile_word::<STACK_TOP>(top);
    top
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn frame_pointers(out: &mut Frames) {
    let (fp, sp): (usize, usize);
    // SAFETY: reads two registers.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        core::arch::asm!("mov {}, rbp", "mov {}, rsp", out(reg) fp, out(reg) sp,
            options(nomem, nostack, preserves_flags));
        #[cfg(target_arch = "aarch64")]
        core::arch::asm!("mov {}, x29", "mov {}, sp", out(reg) fp, out(reg) sp,
            options(nomem, nostack, preserves_flags));
    }
    let top = stack_top().saturating_sub(16);
    let mut fp = fp;
    // The count and the hash in locals: `out` stays in memory across the
    // loop.
    let (mut len, mut folded) = (out.len, out.folded);
    // Each frame: [fp] = the caller's fp, [fp + 8] = the return address.
    // Only addresses between our stack pointer and the stack's top are read,
    // and the chain must climb (so it stays above `sp`), so the walk ends
    // and never faults. A frame pointer need not be aligned (a function
    // built without them leaves anything in the register): unaligned reads.
    if fp < sp {
        return;
    }
    while fp <= top && len < MAX_FRAMES {
        // SAFETY: `[fp, fp + 16)` is inside this thread's live stack
        // (checked above); the reads need no alignment.
        let (next, ret) = unsafe {
            (
                (fp as *const usize).read_unaligned(),
                ((fp + 8) as *const usize).read_unaligned(),
            )
        };
        if ret == 0 {
            break;
        }
        out.buf[len].write(ret);
        len += 1;
        folded = fold(folded, ret);
        if next <= fp {
            break;
        }
        fp = next;
    }
    (out.len, out.folded) = (len, folded);
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn frame_pointers(_: &mut Frames) {}

/// libgcc's unwinder interface (part of every Linux process that links
/// libgcc_s, as Rust's standard library does).
#[repr(C)]
struct UnwindContext {
    _opaque: [u8; 0],
}

type TraceFn = extern "C" fn(*mut UnwindContext, *mut c_void) -> i32;

unsafe extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> i32;
    fn _Unwind_GetIP(ctx: *mut UnwindContext) -> usize;
}

/// `_URC_NO_REASON` and `_URC_END_OF_STACK`.
const CONTINUE: i32 = 0;
const STOP: i32 = 5;

struct Walk<'a> {
    out: &'a mut Frames,
    skip: usize,
}

extern "C" fn step(ctx: *mut UnwindContext, arg: *mut c_void) -> i32 {
    // SAFETY: `arg` is the `Walk` that `dwarf` passed, alive for the call.
    let w = unsafe { &mut *arg.cast::<Walk>() };
    // SAFETY: `ctx` is the context libgcc hands us for this frame.
    let ip = unsafe { _Unwind_GetIP(ctx) };
    if ip == 0 {
        return STOP;
    }
    if w.skip > 0 {
        w.skip -= 1;
        return CONTINUE;
    }
    if w.out.push(ip) { CONTINUE } else { STOP }
}

fn dwarf(out: &mut Frames) {
    // The first frame is this function's own.
    let mut w = Walk { out, skip: 1 };
    // SAFETY: `step` only writes inside `w`, which outlives the call.
    unsafe { _Unwind_Backtrace(step, core::ptr::from_mut(&mut w).cast()) };
}
