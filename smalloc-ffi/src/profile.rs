//! Heap profiling from C, in a library built with the `profile` feature
//! (`cargo build --release -p smalloc-ffi --features profile --target-dir
//! target/prof`: `target/prof/release/libsmalloc.so`, the profiling
//! library to preload; the default library carries none of it). Read when
//! the library loads:
//!
//! * `SMALLOC_PROF=MEAN` starts sampling, one sample per `MEAN` bytes on
//!   average (a number, with an optional `k`, `m` or `g` suffix; `0`: off);
//! * `SMALLOC_PROF_OUT=PREFIX` (default `smalloc-prof`): at exit the live
//!   heap goes to `PREFIX.PID.pb.gz` (pprof, with the allocation profile),
//!   `PREFIX.PID.folded` and `PREFIX.PID.svg`;
//! * `SMALLOC_PROF_UNWIND=fp` walks stacks by frame pointers (programs built
//!   with them); the default is the DWARF unwinder, which works with the
//!   distributions' binaries;
//! * `SMALLOC_PROF_SIGNAL=USR2` (a name or a number): on that signal the
//!   same three files, `PREFIX.PID.N.*`, are written at the next sampled
//!   allocation after it (a signal handler cannot write them).
//!
//! `smalloc_prof_dump(path)` writes the profile to `path` (SVG for a name
//! ending in `.svg`, folded stacks for `.folded`, else pprof).

use core::ffi::{c_char, c_int};

/// `smalloc_prof_dump`: 0, or -1 with `errno` (`ENOSYS` in a library
/// without the profiler; the error of the write otherwise).
pub fn dump(path: *const c_char) -> c_int {
    #[cfg(feature = "profile")]
    return on::dump(path);
    #[cfg(not(feature = "profile"))]
    {
        let _ = path;
        crate::errno::set(libc::ENOSYS);
        -1
    }
}

/// At load: reads the environment and starts sampling if asked.
pub fn on_load() {
    #[cfg(feature = "profile")]
    on::on_load();
}

/// At exit: writes the profile if sampling was asked for.
pub fn at_exit() {
    #[cfg(feature = "profile")]
    on::at_exit();
}

#[cfg(feature = "profile")]
mod on {
    use core::ffi::{CStr, c_char, c_int};
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::format;
    use std::fs::File;
    use std::io::{self, BufWriter};
    use std::string::String;

    use smalloc_core::profile::{self, Kind, Profile, Unwind};

    use crate::introspect::env;

    /// Whether `SMALLOC_PROF` started sampling.
    static ON: AtomicBool = AtomicBool::new(false);
    /// A dump was asked for by the signal.
    static ASKED: AtomicBool = AtomicBool::new(false);
    /// Dumps asked for by the signal so far.
    static DUMPS: AtomicUsize = AtomicUsize::new(0);

    /// `SMALLOC_PROF`'s mean: digits with an optional k, m or g.
    fn mean(v: &[u8]) -> Option<usize> {
        let (digits, shift) = match v.last()? {
            b'k' | b'K' => (&v[..v.len() - 1], 10),
            b'm' | b'M' => (&v[..v.len() - 1], 20),
            b'g' | b'G' => (&v[..v.len() - 1], 30),
            _ => (v, 0),
        };
        let n: usize = core::str::from_utf8(digits).ok()?.parse().ok()?;
        n.checked_mul(1 << shift)
    }

    /// A signal by name (`USR2`, `SIGUSR2`) or number.
    fn signal(v: &str) -> Option<c_int> {
        let name = v.strip_prefix("SIG").unwrap_or(v);
        Some(match name {
            "USR1" => libc::SIGUSR1,
            "USR2" => libc::SIGUSR2,
            "HUP" => libc::SIGHUP,
            "PROF" => libc::SIGPROF,
            "URG" => libc::SIGURG,
            "WINCH" => libc::SIGWINCH,
            _ => name.parse().ok().filter(|&n| n > 0 && n < 64)?,
        })
    }

    extern "C" fn on_signal(_: c_int) {
        // Relaxed: a flag; the dump reads only the profiler's own state.
        ASKED.store(true, Ordering::Relaxed);
    }

    /// After each sample: a dump the signal asked for.
    fn after_sample() {
        // Relaxed: as in `on_signal`.
        if ASKED.swap(false, Ordering::Relaxed) {
            // Relaxed: numbers the files.
            let n = DUMPS.fetch_add(1, Ordering::Relaxed) + 1;
            let _ = profile::without_sampling(|| write_all(&format!("{}.{n}", prefix())));
        }
    }

    pub fn on_load() {
        let Some(m) = env(c"SMALLOC_PROF").and_then(|v| mean(v.to_bytes())) else {
            return;
        };
        if m == 0 {
            return;
        }
        let unwind = match env(c"SMALLOC_PROF_UNWIND").map(CStr::to_bytes) {
            Some(b"fp") => Unwind::FramePointers,
            _ => Unwind::Dwarf,
        };
        if let Some(sig) = env(c"SMALLOC_PROF_SIGNAL")
            .and_then(|v| v.to_str().ok())
            .and_then(signal)
        {
            profile::set_sample_hook(after_sample);
            // SAFETY: a zeroed sigaction is valid; the handler only stores
            // to an atomic (async-signal-safe).
            unsafe {
                let mut sa: libc::sigaction = core::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigaction(sig, &sa, core::ptr::null_mut());
            }
        }
        // Relaxed: read at exit, on this thread or after a join.
        ON.store(profile::start(m, unwind), Ordering::Relaxed);
    }

    /// `SMALLOC_PROF_OUT` and the pid.
    fn prefix() -> String {
        let p = env(c"SMALLOC_PROF_OUT")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("smalloc-prof");
        // SAFETY: getpid has no preconditions.
        format!("{p}.{}", unsafe { libc::getpid() })
    }

    /// Writes PREFIX.pb.gz, PREFIX.folded and PREFIX.svg.
    fn write_all(prefix: &str) -> io::Result<()> {
        let p = Profile::snapshot();
        p.write_pprof(BufWriter::new(File::create(format!("{prefix}.pb.gz"))?))?;
        p.write_folded(
            Kind::Live,
            BufWriter::new(File::create(format!("{prefix}.folded"))?),
        )?;
        p.write_svg(
            Kind::Live,
            BufWriter::new(File::create(format!("{prefix}.svg"))?),
        )
    }

    pub fn at_exit() {
        // Relaxed: see `on_load`.
        if ON.load(Ordering::Relaxed) {
            profile::stop();
            let prefix = profile::without_sampling(prefix);
            // On a thread of its own: the exiting thread's thread-locals,
            // which the SVG writer uses, are gone by now.
            let _ = std::thread::Builder::new()
                .spawn(move || profile::without_sampling(|| write_all(&prefix)))
                .map(|t| t.join());
        }
    }

    pub fn dump(path: *const c_char) -> c_int {
        if path.is_null() {
            crate::errno::set(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller passes a NUL-terminated path.
        let Ok(path) = unsafe { CStr::from_ptr(path) }.to_str() else {
            crate::errno::set(libc::EINVAL);
            return -1;
        };
        let result = profile::without_sampling(|| {
            let p = Profile::snapshot();
            let f = File::create(path)?;
            let w = BufWriter::new(f);
            if path.ends_with(".svg") {
                p.write_svg(Kind::Live, w)
            } else if path.ends_with(".folded") {
                p.write_folded(Kind::Live, w)
            } else {
                p.write_pprof(w)
            }
        });
        match result {
            Ok(()) => 0,
            Err(e) => {
                crate::errno::set(e.raw_os_error().unwrap_or(libc::EIO));
                -1
            }
        }
    }
}
