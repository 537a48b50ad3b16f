//! Thin wrappers over the operating system calls smalloc makes.

use core::ptr;

/// Maps `len` bytes of fresh, zeroed, private anonymous memory without
/// reserving swap for it. With `fixed`, asks for exactly `addr` (never
/// replacing an existing mapping); otherwise `addr` is only a hint (0: none).
pub fn map(addr: usize, len: usize, fixed: bool) -> Option<*mut u8> {
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | NORESERVE
        | if fixed { libc::MAP_FIXED_NOREPLACE } else { 0 };
    // SAFETY: an anonymous mapping without MAP_FIXED never replaces existing
    // memory; the kernel picks a free range (MAP_FIXED_NOREPLACE fails instead
    // of replacing, and kernels before 4.17 treat `addr` as a hint).
    let p = unsafe {
        libc::mmap(
            ptr::with_exposed_provenance_mut(addr),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        #[cfg(miri)]
        miri_maps::record(p.addr(), len);
        Some(p.cast())
    }
}

/// Maps `len` bytes of fresh, zeroed, private anonymous memory at exactly
/// `addr` (page-aligned), never replacing anything mapped there, in small
/// pages only ([`no_huge_pages`]: it is part of the layout). `Err` holds
/// the `errno`: `EEXIST` when something is mapped in the range (also when a
/// kernel older than 4.17 placed it elsewhere), `ENOMEM` when a limit
/// refuses it.
pub fn map_at(addr: usize, len: usize) -> Result<(), i32> {
    match map(addr, len, true) {
        Some(p) if p.addr() == addr => {
            no_huge_pages(expose(p), len);
            Ok(())
        }
        Some(p) => {
            unmap(p, len);
            Err(libc::EEXIST)
        }
        None => Err(errno()),
    }
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: glibc's per-thread errno cell, always valid to read.
    unsafe { *libc::__errno_location() }
}

/// Whether the kernel writes `[addr, addr + len)` (page-aligned, inside a
/// mapping of ours) into a core dump (`MADV_DODUMP`) or leaves it out
/// (`MADV_DONTDUMP`). A refusal (an old kernel, the limit on mappings
/// reached) changes nothing but the dump, so it is ignored.
pub fn set_dumped(addr: usize, len: usize, dumped: bool) {
    #[cfg(not(miri))]
    {
        let advice = if dumped {
            libc::MADV_DODUMP
        } else {
            libc::MADV_DONTDUMP
        };
        // SAFETY: the range lies in a mapping of ours; these advices change
        // only whether it is dumped, never its contents.
        unsafe { libc::madvise(ptr_at(addr), len, advice) };
    }
    #[cfg(miri)]
    let _ = (addr, len, dumped);
}

/// Keeps transparent huge pages out of `[addr, addr + len)` (a mapping of
/// ours), whatever the system's setting (`MADV_NOHUGEPAGE`). A refusal (a
/// kernel without them) changes nothing, so it is ignored.
pub fn no_huge_pages(addr: usize, len: usize) {
    #[cfg(not(miri))]
    {
        // SAFETY: the range lies in a mapping of ours; this advice changes
        // only the size of the pages that back it, never its contents.
        unsafe { libc::madvise(ptr_at(addr), len, libc::MADV_NOHUGEPAGE) };
    }
    #[cfg(miri)]
    let _ = (addr, len);
}

unsafe extern "C" {
    /// glibc's (since 2.17; the libc crate does not declare it).
    fn secure_getenv(name: *const core::ffi::c_char) -> *mut core::ffi::c_char;
}

/// The environment variable `name`, read with `secure_getenv` (so never in
/// secure-execution mode, e.g. a setuid program); `None` if unset. Nothing
/// is allocated.
pub fn env(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: a NUL-terminated name; the result lives as long as the
    // environment, which the allocator never changes.
    let v = unsafe { secure_getenv(name.as_ptr()) };
    // SAFETY: a non-null result is a NUL-terminated string.
    (!v.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(v) }.to_bytes())
}

/// A soft resource limit (`RLIMIT_AS`, `RLIMIT_DATA`, ...) in bytes, `None`
/// when unlimited or unknown.
pub fn limit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer.
    let ok = unsafe { libc::getrlimit(resource, &mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Reads the file at `path` through `f`, a buffer at a time (the buffer on
/// the stack: nothing is allocated); false if it cannot be opened.
pub fn read_file(path: &core::ffi::CStr, mut f: impl FnMut(&[u8])) -> bool {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        // (`get`: the compiler cannot see `n` within the buffer, and a
        // panic must not be reachable from the allocator.)
        f(buf.get(..n as usize).unwrap_or_default());
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    true
}

/// Whether the process has more than one thread now (`Threads:` of
/// `/proc/self/status`; under qemu-user that counts the emulator's own
/// threads too); false if that cannot be read.
pub fn other_threads() -> bool {
    let mut scan = ThreadsLine::default();
    read_file(c"/proc/self/status", |bytes| {
        bytes.iter().for_each(|&b| scan.feed(b))
    }) && scan.threads > 1
}

/// Finds the number on the `Threads:` line of a `/proc/<pid>/status` text
/// fed a byte at a time (no buffer of its own: this runs on the caller's
/// stack, on a cold path of the allocator).
#[derive(Default)]
struct ThreadsLine {
    /// Bytes of `Threads:` matched at the start of the current line;
    /// `usize::MAX` once the line is another one.
    matched: usize,
    /// The number read (0 until then).
    threads: u64,
    /// Whether the digits are being read.
    in_number: bool,
}

impl ThreadsLine {
    const KEY: &[u8] = b"Threads:";

    fn feed(&mut self, b: u8) {
        if b == b'\n' {
            self.matched = 0;
            self.in_number = false;
        } else if self.matched < Self::KEY.len() {
            self.matched = if Self::KEY.get(self.matched) == Some(&b) {
                self.matched + 1
            } else {
                usize::MAX
            };
        } else if self.matched == Self::KEY.len() {
            if b.is_ascii_digit() {
                self.in_number = true;
                self.threads = self
                    .threads
                    .saturating_mul(10)
                    .saturating_add(u64::from(b - b'0'));
            } else if self.in_number || !b.is_ascii_whitespace() {
                self.matched = usize::MAX;
            }
        }
    }
}

/// `MAP_NORESERVE`, which Miri's mmap shim refuses (it accepts exactly
/// `MAP_PRIVATE | MAP_ANONYMOUS`; it reserves nothing anyway).
#[cfg(not(miri))]
const NORESERVE: libc::c_int = libc::MAP_NORESERVE;
#[cfg(miri)]
const NORESERVE: libc::c_int = 0;

/// Unmaps `[p, p + len)`; nothing when `len` is 0. `p` carries the
/// provenance of the mapping it lies in (it is derived from the pointer
/// `map` returned, not rebuilt from an address).
pub fn unmap(p: *mut u8, len: usize) {
    if len == 0 {
        return;
    }
    // Miri unmaps only whole mappings: a partial unmap is bookkept there and
    // the mapping goes when its last byte does.
    #[cfg(miri)]
    let Some((p, len)) = miri_maps::unmap(p.addr(), len).map(|(a, l)| (p.with_addr(a), l)) else {
        return;
    };
    // SAFETY: callers pass only ranges they mapped themselves and no longer
    // hand out.
    let rc = unsafe { libc::munmap(p.cast(), len) };
    debug_assert_eq!(rc, 0, "munmap failed");
}

/// Grows or shrinks the mapping `[p, p + old)` to `new` bytes, moving it if
/// needed and `may_move`. `None` if the kernel refuses (the old mapping is
/// then untouched).
pub fn remap(p: *mut u8, old: usize, new: usize, may_move: bool) -> Option<*mut u8> {
    let flags = if may_move { libc::MREMAP_MAYMOVE } else { 0 };
    // SAFETY: `p..p+old` is a whole mapping of ours (checked by the caller).
    let q = unsafe { libc::mremap(p.cast(), old, new, flags) };
    if q == libc::MAP_FAILED {
        None
    } else {
        #[cfg(miri)]
        miri_maps::moved(p.addr(), q.addr(), new);
        Some(q.cast())
    }
}

/// The page size (asked once, then cached).
pub fn page_size() -> usize {
    use core::sync::atomic::{AtomicUsize, Ordering};
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: every thread computes the same value; no other data depends
    // on it.
    let n = PAGE.load(Ordering::Relaxed);
    if n != 0 {
        return n;
    }
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let n = if n > 0 { n as usize } else { 4096 };
    PAGE.store(n, Ordering::Relaxed);
    n
}

/// Gives the pages of `[p, p + len)` back to the kernel
/// (`MADV_DONTNEED`): they stay mapped and read as zero when next touched.
/// False if the kernel refused: locked pages (`mlock`, `mlockall`) stay,
/// and so does the rest of the range after them (the kernel stops there),
/// with their contents.
///
/// # Safety
/// `p` is page-aligned, `[p, p + len)` lies in a private anonymous mapping
/// of ours, and nobody needs its contents.
pub unsafe fn release(p: *mut u8, len: usize) -> bool {
    // SAFETY: per the contract; the range stays mapped.
    unsafe { libc::madvise(p.cast(), len, libc::MADV_DONTNEED) == 0 }
}

/// The whole pages inside `[start, end)`, as `(first, len)`; `len` is 0
/// when the range holds no whole page. Slots need not start on a page
/// (only those whose size is a multiple of the page do).
#[inline]
pub fn whole_pages(start: usize, end: usize) -> (usize, usize) {
    let page = page_size();
    let first = start.next_multiple_of(page);
    let last = end & !(page - 1);
    (first, last.saturating_sub(first))
}

/// Bytes of `[addr, addr + len)` (page-aligned `addr`, inside a mapping of
/// ours) that are resident (`mincore`); 0 if the kernel refuses.
pub fn resident(addr: usize, len: usize) -> usize {
    let mut bytes = 0;
    let read = resident_runs(addr, len, |_, n, resident| {
        if resident {
            bytes += n;
        }
    });
    if read { bytes } else { 0 }
}

/// Calls `f(start, len, resident)` for each run of pages of `[addr, addr +
/// len)` (page-aligned `addr`, inside a mapping of ours) that are all
/// resident or all not (`mincore`, up to 16 MiB at a time); false if the
/// kernel refused (`f` may have seen part of the range).
pub fn resident_runs(addr: usize, len: usize, mut f: impl FnMut(usize, usize, bool)) -> bool {
    const CHUNK_PAGES: usize = 4096;
    let page = page_size();
    let mut vec = [0u8; CHUNK_PAGES];
    let mut at = addr;
    let end = addr.saturating_add(len);
    while at < end {
        let n = (end - at).min(CHUNK_PAGES * page);
        // SAFETY: the range lies in a mapping of ours (the caller's
        // contract) and `vec` has a byte for each of its pages.
        if unsafe { libc::mincore(ptr_at(at), n, vec.as_mut_ptr()) } != 0 {
            return false;
        }
        let count = n.div_ceil(page).min(CHUNK_PAGES);
        // Indices reduced modulo the vector's length (a power of two): no
        // bounds check, so no panic on an allocation path.
        let bit = |i: usize| vec[i % CHUNK_PAGES] & 1 != 0;
        let mut i = 0;
        while i < count {
            let resident = bit(i);
            let mut j = i + 1;
            while j < count && bit(j) == resident {
                j += 1;
            }
            let start = at + i * page;
            f(start, ((j - i) * page).min(end - start), resident);
            i = j;
        }
        at += n;
    }
    true
}

/// Milliseconds of the coarse monotonic clock (a vDSO read, no system
/// call); 0 if it cannot be read.
pub fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// This process's id.
pub fn pid() -> usize {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as usize }
}

/// Lets another thread run.
pub fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// `x`, hidden from the optimizer so it keeps the value in a register as
/// computed instead of deriving what it needs from earlier values (which,
/// on the hot path of free, costs two more instructions). No code.
#[inline(always)]
#[cfg_attr(miri, allow(unused_mut))] // Miri runs no assembly
pub fn opaque(mut x: usize) -> usize {
    #[cfg(not(miri))]
    // SAFETY: an empty assembly block that only "changes" a register.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags))
    };
    x
}

/// Exposes the provenance of `p` so later integer-to-pointer conversions of
/// addresses inside the same mapping are valid; returns its address.
pub fn expose(p: *mut u8) -> usize {
    p.expose_provenance()
}

/// A pointer to `addr`, with the provenance of the mapping it lies in.
#[inline(always)]
pub fn ptr_at<T>(addr: usize) -> *mut T {
    ptr::with_exposed_provenance_mut(addr)
}

/// Asks the CPU to bring the cache line at `base + offset` in for a read
/// soon; a hint that never faults, whatever the address. Two operands so
/// that aarch64 takes them in one `prfm`, as x86-64 does in its addressing.
#[inline(always)]
pub fn prefetch(base: usize, offset: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch reads nothing architecturally and never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            base.wrapping_add(offset) as *const i8,
        )
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: as above: `prfm` is a hint that never faults.
    unsafe {
        core::arch::asm!(
            "prfm pldl1keep, [{0}, {1}]",
            in(reg) base,
            in(reg) offset,
            options(nostack, preserves_flags, readonly)
        )
    };
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    let _ = (base, offset);
}

/// Bookkeeping of mappings under Miri, whose `munmap` shim frees only a
/// whole allocation made by one `mmap` (a partial `munmap` is reported as
/// undefined behaviour: "does not point to the beginning of an object").
/// The allocator trims over-sized mappings (the reservation, over-aligned
/// big allocations) and drops the tails of shrunk ones, so under Miri
/// [`unmap`](super::unmap) counts the bytes unmapped from each mapping and
/// unmaps it for real when none is left. The trimmed parts therefore stay
/// accessible under Miri (a use of them goes unnoticed); a whole mapping
/// freed by its last unmap is checked as usual.
#[cfg(miri)]
mod miri_maps {
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Most mappings live at once under Miri's (small) tests.
    const N: usize = 4096;
    /// Start (0: free entry), length and bytes already unmapped of each
    /// mapping; read and written only under [`LOCK`].
    static START: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];
    static LEN: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];
    static GONE: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];
    static LOCK: AtomicBool = AtomicBool::new(false);

    fn locked<R>(f: impl FnOnce() -> R) -> R {
        // Acquire/Release: the lock orders the table accesses.
        while LOCK
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            super::yield_now();
        }
        let r = f();
        LOCK.store(false, Ordering::Release);
        r
    }

    fn find(pred: impl Fn(usize, usize) -> bool) -> Option<usize> {
        (0..N).find(|&i| {
            let start = START[i].load(Ordering::Relaxed);
            start != 0 && pred(start, LEN[i].load(Ordering::Relaxed))
        })
    }

    /// Records a new mapping.
    pub fn record(start: usize, len: usize) {
        locked(|| {
            let i = (0..N)
                .find(|&i| START[i].load(Ordering::Relaxed) == 0)
                .expect("miri_maps: table full");
            START[i].store(start, Ordering::Relaxed);
            LEN[i].store(len, Ordering::Relaxed);
            GONE[i].store(0, Ordering::Relaxed);
        })
    }

    /// Accounts for unmapping `[addr, addr + len)`; returns the whole
    /// mapping to unmap when nothing of it is left (or the range itself if
    /// it is in no known mapping, for Miri to judge).
    pub fn unmap(addr: usize, len: usize) -> Option<(usize, usize)> {
        locked(|| {
            let Some(i) = find(|s, l| s <= addr && addr + len <= s + l) else {
                return Some((addr, len));
            };
            let (start, total) = (
                START[i].load(Ordering::Relaxed),
                LEN[i].load(Ordering::Relaxed),
            );
            let gone = GONE[i].load(Ordering::Relaxed) + len;
            assert!(gone <= total, "miri_maps: unmapped more than mapped");
            if gone == total {
                START[i].store(0, Ordering::Relaxed);
                Some((start, total))
            } else {
                GONE[i].store(gone, Ordering::Relaxed);
                None
            }
        })
    }

    /// Records that `mremap` moved the whole mapping at `old` to `new`.
    pub fn moved(old: usize, new: usize, len: usize) {
        locked(|| {
            let i = find(|s, _| s == old).expect("miri_maps: remap of an unknown mapping");
            assert_eq!(
                GONE[i].load(Ordering::Relaxed),
                0,
                "miri_maps: remap of a trimmed mapping"
            );
            START[i].store(new, Ordering::Relaxed);
            LEN[i].store(len, Ordering::Relaxed);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ThreadsLine;

    fn threads(text: &[u8]) -> u64 {
        let mut scan = ThreadsLine::default();
        text.iter().for_each(|&b| scan.feed(b));
        scan.threads
    }

    #[test]
    fn the_thread_count_is_read_from_its_line() {
        let status =
            b"Name:\tThreads: 7\nUmask:\t0022\nState:\tS (sleeping)\nThreads:\t5\nSigQ:\t0/1\n";
        assert_eq!(threads(status), 5);
        assert_eq!(threads(b"Threads:\t12"), 12);
        assert_eq!(threads(b"Name:\tx\n"), 0);
        assert_eq!(threads(b"Threads:\t\n"), 0);
        assert_eq!(threads(b"XThreads:\t9\n"), 0);
    }
}
