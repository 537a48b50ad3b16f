//! glibc's introspection calls with glibc's semantics and smalloc's
//! numbers (`malloc_stats`, `mallinfo2`, `mallinfo`, `malloc_trim`,
//! `malloc_info`), and the statistics report at exit (`SMALLOC_STATS`).
//! Every number comes from the core's snapshot (`smalloc::stats`), which
//! reads the lists' metadata; nothing here allocates: text is formatted
//! into a stack buffer and written with `write(2)` or `fwrite`.

use core::ffi::{CStr, c_int};
use core::fmt::{self, Write};

use smalloc_core::raw;
use smalloc_core::stats::{self, Snapshot};

use crate::prefixed::smalloc_mallinfo2_t;

/// Bytes of the stack buffer: a whole report fits, so that it reaches a
/// shared file in one `write` (appends of several processes do not mix).
const BUF: usize = 16 << 10;

/// Formats into a stack buffer and hands full buffers to `sink`.
struct Out<F: FnMut(&[u8])> {
    buf: [u8; BUF],
    len: usize,
    sink: F,
}

impl<F: FnMut(&[u8])> Out<F> {
    fn new(sink: F) -> Self {
        Out {
            buf: [0; BUF],
            len: 0,
            sink,
        }
    }

    fn flush(&mut self) {
        (self.sink)(&self.buf[..self.len]);
        self.len = 0;
    }
}

impl<F: FnMut(&[u8])> Write for Out<F> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for chunk in s.as_bytes().chunks(self.buf.len()) {
            if self.len + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
        Ok(())
    }
}

/// A sink writing to file descriptor `fd`.
fn to_fd(fd: c_int) -> impl FnMut(&[u8]) {
    move |mut bytes: &[u8]| {
        while !bytes.is_empty() {
            // SAFETY: `bytes` is readable; a bad `fd` only fails.
            let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
            if n <= 0 {
                return;
            }
            bytes = &bytes[n as usize..];
        }
    }
}

/// glibc's `mallinfo2` fields from a snapshot: the slots are the arena
/// (`arena` = slots ever handed out, `uordblks` in use, `fordblks` and
/// `ordblks` freed on the lists, `keepcost` what a trim could release), big
/// allocations the mmapped blocks (`hblks`, `hblkhd`).
pub fn mallinfo2() -> smalloc_mallinfo2_t {
    let s = stats::snapshot();
    let n = |x: u64| x as usize;
    smalloc_mallinfo2_t {
        arena: n(s.handed_out_bytes()),
        ordblks: n(s.free_slots()),
        smblks: 0,
        hblks: n(s.big_count),
        hblkhd: n(s.big_bytes),
        usmblks: 0,
        fsmblks: 0,
        uordblks: n(s.live_bytes()),
        fordblks: n(s.free_bytes()),
        keepcost: n(s.trimmable_bytes),
    }
}

/// glibc's old `struct mallinfo`: `int` fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo {
    arena: c_int,
    ordblks: c_int,
    smblks: c_int,
    hblks: c_int,
    hblkhd: c_int,
    usmblks: c_int,
    fsmblks: c_int,
    uordblks: c_int,
    fordblks: c_int,
    keepcost: c_int,
}

/// [`mallinfo2`] with every field saturated to `INT_MAX` (glibc wraps
/// them; a saturated value at least says "this much or more").
pub fn mallinfo() -> Mallinfo {
    let m = mallinfo2();
    let i = |x: usize| x.min(c_int::MAX as usize) as c_int;
    Mallinfo {
        arena: i(m.arena),
        ordblks: i(m.ordblks),
        smblks: i(m.smblks),
        hblks: i(m.hblks),
        hblkhd: i(m.hblkhd),
        usmblks: i(m.usmblks),
        fsmblks: i(m.fsmblks),
        uordblks: i(m.uordblks),
        fordblks: i(m.fordblks),
        keepcost: i(m.keepcost),
    }
}

/// `malloc_stats`: the report (`smalloc::stats::report`) on stderr.
pub fn malloc_stats() {
    let mut out = Out::new(to_fd(2));
    let _ = stats::report(&mut out, &stats::snapshot());
    out.flush();
}

/// `malloc_trim`: gives back the pages of freed slots beyond `pad` bytes
/// of them; 1 if it released anything, else 0.
pub fn malloc_trim(pad: usize) -> c_int {
    c_int::from(stats::trim(pad) != 0)
}

/// `malloc_info(options, fp)`: glibc's XML document with smalloc's
/// numbers (one heap; the free slots by size class). `options` must be 0
/// (else -1 with `errno = EINVAL`, as glibc).
///
/// # Safety
/// `fp` is an open stdio stream.
pub unsafe fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    if options != 0 {
        crate::errno::set(libc::EINVAL);
        return -1;
    }
    let mut out = Out::new(|bytes: &[u8]| {
        // SAFETY: `fp` is an open stream (the caller's contract).
        unsafe { libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), fp) };
    });
    let _ = info_xml(&mut out, &stats::snapshot());
    out.flush();
    0
}

/// The `malloc_info` document of `s`.
fn info_xml(w: &mut impl Write, s: &Snapshot) -> fmt::Result {
    let (free, free_bytes) = (s.free_slots(), s.free_bytes());
    let system = s.handed_out_bytes();
    let totals = |w: &mut dyn Write| -> fmt::Result {
        writeln!(w, "<total type=\"fast\" count=\"0\" size=\"0\"/>")?;
        writeln!(
            w,
            "<total type=\"rest\" count=\"{free}\" size=\"{free_bytes}\"/>"
        )
    };
    let system_lines = |w: &mut dyn Write| -> fmt::Result {
        writeln!(w, "<system type=\"current\" size=\"{system}\"/>")?;
        writeln!(w, "<system type=\"max\" size=\"{system}\"/>")?;
        writeln!(w, "<aspace type=\"total\" size=\"{system}\"/>")?;
        writeln!(w, "<aspace type=\"mprotect\" size=\"{system}\"/>")
    };
    writeln!(w, "<malloc version=\"1\">")?;
    writeln!(w, "<heap nr=\"0\">")?;
    writeln!(w, "<sizes>")?;
    for (sc, c) in s.used_classes().filter(|(_, c)| c.free() != 0) {
        let below = if sc > raw::MIN_SC {
            raw::class_size(sc - 1)
        } else {
            0
        };
        let (from, to) = (below as u64 + 1, raw::class_size(sc) as u64);
        let (count, total) = (c.free(), c.free() * to);
        writeln!(
            w,
            "<size from=\"{from}\" to=\"{to}\" total=\"{total}\" count=\"{count}\"/>"
        )?;
    }
    writeln!(w, "</sizes>")?;
    totals(w)?;
    system_lines(w)?;
    writeln!(w, "</heap>")?;
    totals(w)?;
    let (n, bytes) = (s.big_count, s.big_bytes);
    writeln!(w, "<total type=\"mmap\" count=\"{n}\" size=\"{bytes}\"/>")?;
    system_lines(w)?;
    writeln!(w, "</malloc>")
}

unsafe extern "C" {
    /// glibc's (since 2.17; the libc crate does not declare it).
    fn secure_getenv(name: *const core::ffi::c_char) -> *mut core::ffi::c_char;
}

// Every other reader of the environment in the shared library goes through
// `secure_getenv` too: the link of libsmalloc.so wraps `getenv`
// (`-Wl,--wrap=getenv`, build.rs), so the standard library's own readers
// (`RUST_BACKTRACE` on a panic, `RUST_MIN_STACK` for a thread) call
// `__wrap_getenv`, defined here, hidden (not exported), as a jump to
// `secure_getenv`; the library imports no plain `getenv`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
core::arch::global_asm!(
    ".pushsection .text.__wrap_getenv,\"ax\",@progbits",
    ".globl __wrap_getenv",
    ".hidden __wrap_getenv",
    ".type __wrap_getenv,@function",
    "__wrap_getenv:",
    "jmp {f}@PLT",
    ".size __wrap_getenv, . - __wrap_getenv",
    ".popsection",
    f = sym secure_getenv,
);
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
core::arch::global_asm!(
    ".pushsection .text.__wrap_getenv,\"ax\",%progbits",
    ".globl __wrap_getenv",
    ".hidden __wrap_getenv",
    ".type __wrap_getenv,%function",
    ".p2align 2",
    "__wrap_getenv:",
    "b {f}",
    ".size __wrap_getenv, . - __wrap_getenv",
    ".popsection",
    f = sym secure_getenv,
);

/// The environment variable `name`, if set, with `secure_getenv`'s rule:
/// never in secure-execution mode (a setuid or setgid program, one with
/// file capabilities), so that a library installed system-wide cannot be
/// told by an unprivileged user to write files as root. Every `SMALLOC_*`
/// variable is read here.
pub(crate) fn env(name: &CStr) -> Option<&'static CStr> {
    // SAFETY: `name` is NUL-terminated; secure_getenv does not allocate and
    // the string it returns lives as long as the environment.
    let v = unsafe { secure_getenv(name.as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) })
}

/// At exit: with `SMALLOC_STATS` set (and not `0`), the report, on stderr
/// or appended to the file `SMALLOC_STATS_FILE` names, after a line
/// `smalloc statistics at exit: pid=N`.
pub fn at_exit() {
    match env(c"SMALLOC_STATS") {
        Some(v) if !v.is_empty() && v != c"0" => {}
        _ => return,
    }
    let fd = match env(c"SMALLOC_STATS_FILE") {
        Some(path) => {
            let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC;
            // SAFETY: `path` is a NUL-terminated string.
            let fd = unsafe { libc::open(path.as_ptr(), flags, 0o644) };
            if fd < 0 {
                return;
            }
            fd
        }
        None => 2,
    };
    let mut out = Out::new(to_fd(fd));
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = writeln!(out, "smalloc statistics at exit: pid={pid}");
    let _ = stats::report(&mut out, &stats::snapshot());
    out.flush();
    if fd != 2 {
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
    }
}
