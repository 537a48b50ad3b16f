//! The call stack of a sample, as return addresses, taken without
//! allocating: by frame pointers (the default; the program must be built
//! with them, `-C force-frame-pointers=yes` or `-fno-omit-frame-pointer`),
//! or by the DWARF unwinder of libgcc (`_Unwind_Backtrace`: slower, works
//! without frame pointers; it may allocate on first use, which the caller's
//! re-entrancy guard keeps out of the profile).

use core::ffi::c_void;
use core::mem::MaybeUninit;

use super::MAX_FRAMES;
use crate::thread_words::profile::STACK_TOP;
use crate::thread_words::{load as profile_word, store as set_profile_word};

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

/// Fills `out` with the return addresses of the callers, innermost first,
/// by libgcc's DWARF unwinder.
#[inline(never)]
pub fn capture_dwarf(out: &mut Frames) {
    dwarf(out)
}

/// The top (highest address) of the calling thread's stack, found once.
pub fn stack_top() -> usize {
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

/// A frame-pointer walk as it read the stack: where it began, and at each
/// frame the caller's frame pointer and the return address it read. The
/// walk is a function of its start, the stack's top and the words it read,
/// so if it would begin at the same place again and those words still hold
/// the same values, it would read the same frames: [`Walks`] checks that
/// by rereading them at the known addresses (independent loads, where the
/// walk is a chain of dependent ones) and then needs no walk, no hash and no
/// lookup in the stack table. A thread keeps a few in its record.
pub struct FpWalk {
    /// Where the walk began, when `index` is known; 0 otherwise.
    fp0: usize,
    /// Where the last walk began.
    began: usize,
    /// The caller's frame pointer read at each frame kept in `frames`.
    nexts: [MaybeUninit<usize>; MAX_FRAMES],
    /// Whether the walk ended on a zero return address, read one frame past
    /// the last one kept.
    zero_end: bool,
    /// The return addresses.
    pub frames: Frames,
    /// The stack's index in the stack table (when `fp0` is set).
    pub index: usize,
}

impl FpWalk {
    /// No walk yet.
    #[inline(always)]
    pub fn new() -> FpWalk {
        FpWalk {
            fp0: 0,
            began: 0,
            // SAFETY: an array of `MaybeUninit` needs no initialization.
            nexts: unsafe { MaybeUninit::uninit().assume_init() },
            zero_end: false,
            frames: Frames::new(),
            index: 0,
        }
    }

    /// The last walk's stack is at `index` in the stack table.
    fn remember(&mut self, index: usize) {
        self.index = index;
        self.fp0 = self.began;
    }

    /// Whether the words the last walk read still hold what it read.
    ///
    /// # Safety
    /// The walk began where the caller's would (`fp0` is the caller's frame
    /// pointer, at or above its stack pointer), on the calling thread.
    #[inline(always)]
    unsafe fn unchanged(&self) -> bool {
        let n = self.frames.len;
        let (nexts, rets) = (&self.nexts[..n], &self.frames.buf[..n]);
        let mut at = self.fp0;
        let mut diff = 0;
        for (next, ret) in nexts.iter().zip(rets) {
            // SAFETY: the walk wrote the first `n` cells of both; it read
            // `[at, at + 16)`, which lies between its start (at or above our
            // stack pointer, per the contract) and the thread's stack top.
            let (next, ret) = unsafe { (next.assume_init(), ret.assume_init()) };
            // SAFETY: as above.
            let (m_next, m_ret) = unsafe { read_frame(at) };
            diff |= (m_next ^ next) | (m_ret ^ ret);
            at = next;
        }
        if self.zero_end {
            // SAFETY: as above: the walk read this frame too.
            diff |= unsafe { read_frame(at) }.1;
        }
        diff == 0
    }
}

/// The two words of the frame at `fp`: the caller's frame pointer and the
/// return address.
///
/// # Safety
/// `[fp, fp + 16)` lies in the calling thread's live stack.
#[inline(always)]
unsafe fn read_frame(fp: usize) -> (usize, usize) {
    // SAFETY: per the contract; the reads need no alignment (a function
    // built without frame pointers leaves anything in the register).
    unsafe {
        (
            (fp as *const usize).read_unaligned(),
            ((fp + 8) as *const usize).read_unaligned(),
        )
    }
}

/// The walks of a thread's last distinct stacks (a program samples a few
/// paths in turn: its small and large allocations, say, reach the
/// profiler by different paths; its setup and its main loop), the most
/// recent one tried first, and which entry the next new walk fills.
pub struct Walks<const N: usize> {
    known: [FpWalk; N],
    last: usize,
    fill: usize,
    /// The top of the stack they were walked on.
    top: usize,
}

impl<const N: usize> Walks<N> {
    /// None known.
    #[inline(always)]
    pub fn new() -> Self {
        Walks {
            known: core::array::from_fn(|_| FpWalk::new()),
            last: 0,
            fill: 0,
            top: 0,
        }
    }

    /// A record changed hands: its walks stay known only if the new holder's
    /// stack has the same top (a thread started where one ended: its stack
    /// reused, and likely its paths), which keeps every word they reread
    /// inside the caller's stack.
    pub fn handed_to_this_thread(&mut self) {
        if self.top != stack_top() {
            self.known.iter_mut().for_each(|w| w.fp0 = 0);
        }
    }

    /// The stack-table index of the calling thread's stack, by frame
    /// pointers, if one of the known walks is of that stack; otherwise it is
    /// walked (see [`walked`](Self::walked)) and the result is `None`.
    /// Inlined: the walk starts at the caller's frame (one frame fewer to
    /// reread, and no registers saved for a call).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[inline(always)]
    pub fn find_or_walk(&mut self) -> Option<usize> {
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
        if fp < sp {
            return self.no_walk();
        }
        // SAFETY: a walk whose `fp0` is our frame pointer began where ours
        // would, at or above our stack pointer, and read up to its stack's
        // top, which is ours (see `handed_to_this_thread`).
        let same = |w: &FpWalk| w.fp0 == fp && unsafe { w.unchanged() };
        if same(&self.known[self.last]) {
            return Some(self.known[self.last].index);
        }
        if let Some(i) = (0..N).find(|&i| i != self.last && same(&self.known[i])) {
            self.last = i;
            return Some(self.known[i].index);
        }
        self.top = stack_top();
        // SAFETY: `fp` is our frame pointer, at or above our stack pointer;
        // `top` is our stack's top less a frame.
        unsafe { walk_from(&mut self.known[self.fill], fp, self.top.saturating_sub(16)) };
        None
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub fn find_or_walk(&mut self) -> Option<usize> {
        self.no_walk()
    }

    /// No walk can be made (no frame pointer, or an architecture whose
    /// frames are not known here): the stack is empty.
    fn no_walk(&mut self) -> Option<usize> {
        let w = &mut self.known[self.fill];
        w.fp0 = 0;
        w.frames.len = 0;
        None
    }

    /// The frames of the walk [`find_or_walk`](Self::find_or_walk) just
    /// made.
    pub fn walked(&self) -> &Frames {
        &self.known[self.fill].frames
    }

    /// The stack just walked is at `index` in the stack table: known from
    /// now on, until its entry is filled again.
    pub fn remember(&mut self, index: usize) {
        self.known[self.fill].remember(index);
        self.last = self.fill;
        self.fill = (self.fill + 1) % N;
    }
}

/// Walks the frame-pointer chain from `fp` into `w`, reading frames only
/// at or below `top`, and remembers where it began (its index not known
/// yet).
///
/// # Safety
/// Every address from `fp` to `top + 16` is readable.
unsafe fn walk_from(w: &mut FpWalk, fp: usize, top: usize) {
    w.fp0 = 0;
    w.began = fp;
    w.zero_end = false;
    let mut fp = fp;
    // The count and the hash in locals: `w` stays in memory across the loop.
    let (mut len, mut folded) = (0, 0);
    // Each frame: [fp] = the caller's fp, [fp + 8] = the return address.
    // Only addresses between the start and `top` are read, and the chain
    // must climb, so the walk ends and never faults.
    while fp <= top && len < MAX_FRAMES {
        // SAFETY: `[fp, fp + 16)` lies between the start and `top + 16`
        // (per the contract).
        let (next, ret) = unsafe { read_frame(fp) };
        if ret == 0 {
            w.zero_end = true;
            break;
        }
        w.frames.buf[len].write(ret);
        w.nexts[len].write(next);
        len += 1;
        folded = fold(folded, ret);
        if next <= fp {
            break;
        }
        fp = next;
    }
    (w.frames.len, w.frames.folded) = (len, folded);
}

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

#[cfg(test)]
mod tests {
    use std::boxed::Box;

    use super::{FpWalk, walk_from};

    /// A stack in an array (its address exposed, as a thread's stack is to
    /// the walk, which reads it by addresses).
    struct Fake {
        words: [usize; 64],
    }

    impl Fake {
        /// Frames at the given word offsets, each holding the next one's
        /// address and a return address `0x1000 + k`; the last one's caller
        /// is below it (the walk's end).
        fn new(at: &[usize]) -> Box<Fake> {
            let mut f = Box::new(Fake { words: [0; 64] });
            for (k, &w) in at.iter().enumerate() {
                let next = at.get(k + 1).map_or(0, |&n| f.addr(n));
                f.set(w, next);
                f.set(w + 1, 0x1000 + k);
            }
            f
        }

        /// The address of word `i`.
        fn addr(&mut self, i: usize) -> usize {
            self.words.as_mut_ptr().expose_provenance() + 8 * i
        }

        /// Writes word `i` through the exposed address (as a program writes
        /// its stack behind the walk's back).
        fn set(&mut self, i: usize, v: usize) {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(self.addr(i));
            // SAFETY: word `i` of our array.
            unsafe { p.write_volatile(v) };
        }

        /// Walks from word 0 up to word `top`.
        fn walk(&mut self, top: usize) -> FpWalk {
            let mut w = FpWalk::new();
            let (start, top) = (self.addr(0), self.addr(top));
            // SAFETY: the array spans `start..top + 16`.
            unsafe { walk_from(&mut w, start, top) };
            w
        }
    }

    /// Whether the walk still holds.
    fn holds(w: &FpWalk) -> bool {
        // SAFETY: the walk read inside its fake stack, which outlives it.
        unsafe { w.unchanged() }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // addresses rebuilt from integers
    fn a_known_walk_holds_only_while_the_words_it_read_do() {
        let at = [0, 6, 14, 20, 30];
        let mut f = Fake::new(&at);
        let mut w = f.walk(62);
        assert_eq!(w.frames.get(), [0x1000, 0x1001, 0x1002, 0x1003, 0x1004]);
        w.remember(7);
        assert!(holds(&w));
        // Words no frame holds: still the same stack.
        f.set(3, 99);
        f.set(33, 98);
        assert!(holds(&w));
        // An outer return address (a caller called from elsewhere), and
        // back.
        f.set(at[3] + 1, 0x2000);
        assert!(!holds(&w));
        f.set(at[3] + 1, 0x1003);
        assert!(holds(&w));
        // The chain moved (a caller's frame elsewhere), and back.
        let (elsewhere, back) = (f.addr(40), f.addr(at[3]));
        f.set(at[2], elsewhere);
        assert!(!holds(&w));
        f.set(at[2], back);
        assert!(holds(&w));
        // The last frame's caller pointer climbs now: the walk would go on.
        let above = f.addr(40);
        f.set(at[4], above);
        assert!(!holds(&w));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // addresses rebuilt from integers
    fn a_walk_that_ended_on_a_zero_return_address_checks_it_again() {
        let at = [0, 6, 14];
        let mut f = Fake::new(&at);
        // The last frame leads on to one whose return address is zero.
        let (w24, w30) = (f.addr(24), f.addr(30));
        f.set(at[2], w24);
        f.set(24, w30);
        f.set(25, 0);
        let mut w = f.walk(62);
        assert_eq!(w.frames.get(), [0x1000, 0x1001, 0x1002]);
        w.remember(3);
        assert!(holds(&w));
        // That return address is a real one now: the walk would go on.
        f.set(25, 0x1003);
        assert!(!holds(&w));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // addresses rebuilt from integers
    fn a_walk_stops_at_the_top() {
        let mut f = Fake::new(&[0, 6, 14, 20, 30]);
        let mut w = f.walk(20);
        assert_eq!(w.frames.get(), [0x1000, 0x1001, 0x1002, 0x1003]);
        w.remember(1);
        assert_eq!(w.fp0, f.addr(0));
        assert!(holds(&w));
    }
}
