//! An optional one-line usage report at exit, to prove that a program run
//! with `LD_PRELOAD` really allocated from smalloc.
//!
//! When the environment variable `SMALLOC_REPORT` names a file, the exit
//! handler appends one line to it:
//!
//! ```text
//! smalloc pid=1234 lists=57 handed_out=48211 bytes=9834112 shared_frees=40007
//! ```
//!
//! * `lists`: (slab, size class) pairs that ever handed out a slot;
//! * `handed_out`: distinct slots ever handed out (each counted once, however
//!   often it was reused);
//! * `bytes`: the same in bytes (slots times their size);
//! * `shared_frees`: frees onto the shared lists (by threads that did not
//!   own the slot's slab, and of large slots; modulo 2^32 per list). A
//!   thread's frees of its own slab's small slots are not counted.
//!
//! Everything is read from the metadata the allocator keeps anyway
//! ([`hooks::list_usage`]): the hot paths carry no counter. The line is formatted by hand
//! into a stack buffer and written with `write(2)`: no allocation.

use smalloc_core::layout::NUM_SLABS;
use smalloc_core::{hooks, raw};

/// Counts read from the free-list heads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Free lists ever used.
    pub lists: u64,
    /// Distinct slots ever handed out.
    pub handed_out: u64,
    /// Bytes of those slots.
    pub bytes: u64,
    /// Frees onto the shared lists (modulo 2^32 per list).
    pub shared_frees: u64,
}

/// Reads the usage counts from every (slab, size class).
pub fn usage() -> Usage {
    let mut u = Usage::default();
    for slab in 0..NUM_SLABS {
        for sc in raw::MIN_SC..=raw::MAX_SC {
            let l = hooks::list_usage(slab, sc);
            if l.handed_out == 0 {
                continue;
            }
            u.lists += 1;
            u.handed_out += l.handed_out;
            u.bytes += l.handed_out << sc;
            u.shared_frees += l.shared_frees;
        }
    }
    u
}

/// A fixed-capacity byte buffer for one line.
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn push(&mut self, s: &[u8]) {
        for &b in s {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    fn push_u64(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}

/// Formats the report line of `pid` and `u`.
fn line(pid: u64, u: Usage) -> Line {
    let mut l = Line {
        buf: [0; 512],
        len: 0,
    };
    l.push(b"smalloc pid=");
    l.push_u64(pid);
    l.push(b" lists=");
    l.push_u64(u.lists);
    l.push(b" handed_out=");
    l.push_u64(u.handed_out);
    l.push(b" bytes=");
    l.push_u64(u.bytes);
    l.push(b" shared_frees=");
    l.push_u64(u.shared_frees);
    // The core's cold-path event counts, in a build with its `diag`
    // feature (`--features diag`).
    if let Some(counts) = smalloc_core::diag::snapshot() {
        for (name, n) in smalloc_core::diag::NAMES.iter().zip(counts) {
            l.push(b" ");
            l.push(name.as_bytes());
            l.push(b"=");
            l.push_u64(n);
        }
    }
    l.push(b"\n");
    l
}

/// Appends the report line to the file named by `SMALLOC_REPORT`, if set.
pub fn at_exit() {
    // SAFETY: the name is NUL-terminated; getenv does not allocate.
    let path = unsafe { libc::getenv(c"SMALLOC_REPORT".as_ptr()) };
    if path.is_null() {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let l = line(pid, usage());
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC;
    // SAFETY: `path` is a NUL-terminated string from the environment.
    let fd = unsafe { libc::open(path, flags, 0o644) };
    if fd < 0 {
        return;
    }
    // SAFETY: the buffer holds `l.len` initialized bytes; `fd` is ours.
    unsafe {
        libc::write(fd, l.buf.as_ptr().cast(), l.len);
        libc::close(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_the_line() {
        let u = Usage {
            lists: 3,
            handed_out: 1234567,
            bytes: 99,
            shared_frees: 0,
        };
        let l = line(42, u);
        assert_eq!(
            &l.buf[..l.len],
            b"smalloc pid=42 lists=3 handed_out=1234567 bytes=99 shared_frees=0\n"
        );
    }
}
