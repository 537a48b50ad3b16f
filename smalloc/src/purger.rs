//! The background thread that runs the purge's sweeps
//! ([`purge`](crate::purge)): started by the first cold path that may leave
//! something to give back (a free onto a shared list, a thread's end) once
//! a second thread has allocated, it sleeps a purge delay, sweeps, and
//! repeats while lists change; when a sweep finds nothing new it waits
//! until a cold path wakes it (or a second passes). A process in which one
//! thread ever allocated has none (a second thread would make
//! `unshare(CLONE_NEWUSER)` fail and Python warn at `os.fork()`): it sweeps
//! on its own cold frees and refills ([`purge::cold_tick_freed`],
//! [`purge::cold_tick_refill`]).
//!
//! It never allocates, holds no lock of the C library, and has every
//! signal blocked. Across `fork` (`pthread_atfork`): the forking thread
//! takes the sweep lock first, so no sweep holds a list or a claim in the
//! child; the child has no purger, and the next cold path that needs one
//! starts it.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::{occupancy, purge, sys};

/// No thread yet (or, in a fork child, none any more).
const NONE: u32 = 0;
/// A thread is being started.
const STARTING: u32 = 1;
/// The thread runs.
const RUNNING: u32 = 2;
/// The C library refused a thread: purges happen on request only.
const FAILED: u32 = 3;
/// With [`RUNNING`]: the thread waits for a wake (the word is its futex).
const WAITING: u32 = 4;

/// The thread's state: one word, so that a cold free reads one line.
static STATE: AtomicU32 = AtomicU32::new(NONE);

/// How long the thread waits when a sweep found nothing new, unless woken.
const IDLE_WAIT_MS: u32 = 1000;

/// Whether the purging thread runs and does not wait (one load).
#[inline(always)]
pub fn runs() -> bool {
    // Relaxed: a hint.
    STATE.load(Ordering::Relaxed) == RUNNING
}

/// Wakes the purging thread if it waits, or starts it if purging is on, it
/// never ran, and a second thread has allocated. Returns whether it runs.
/// Cold paths only.
#[inline]
pub fn wake() -> bool {
    // Relaxed: a hint; a lost wake costs at most one idle wait.
    let s = STATE.load(Ordering::Relaxed);
    s == RUNNING || wake_slow(s)
}

/// [`wake`] when the thread waits or does not run.
#[cold]
#[inline(never)]
fn wake_slow(s: u32) -> bool {
    if s == RUNNING | WAITING {
        // Relaxed: the futex word itself is the synchronization.
        if STATE
            .compare_exchange(s, RUNNING, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            futex_wake(&STATE);
        }
        return true;
    }
    if s == NONE && !cfg!(miri) && occupancy::many_threads_seen() && purge::delay_ms() != 0 {
        start();
    }
    // Relaxed: as above.
    STATE.load(Ordering::Relaxed) & !WAITING == RUNNING
}

/// Whether the `fork` handlers were registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Starts the thread (once; again in a fork child).
#[cold]
#[inline(never)]
fn start() {
    // Relaxed: only decides who starts it.
    if STATE
        .compare_exchange(NONE, STARTING, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Relaxed: only decides who registers.
    if !REGISTERED.swap(true, Ordering::Relaxed) {
        // SAFETY: the handlers only touch atomics and yield.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    }
    // SAFETY: plain C calls on locals; the thread's function never returns
    // and touches only the allocator's statics and the reservation. Every
    // signal is blocked while it is created, so it starts with all blocked.
    let ok = unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, 128 << 10);
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut t, &attr, run, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        if rc == 0 {
            libc::pthread_setname_np(t, c"smalloc-purge".as_ptr());
        }
        rc == 0
    };
    // Relaxed: the state is a hint for `wake`. The thread may be waiting
    // already: then it is woken once for nothing.
    STATE.store(if ok { RUNNING } else { FAILED }, Ordering::Relaxed);
}

/// The thread: sleep a delay, sweep; wait for a wake after a sweep that
/// found nothing new.
extern "C" fn run(_: *mut c_void) -> *mut c_void {
    loop {
        let delay = purge::delay_ms();
        if delay == 0 {
            idle_wait();
            continue;
        }
        sleep_ms(delay);
        if !purge::background_sweep().pending {
            idle_wait();
        }
    }
}

/// Waits until woken, or [`IDLE_WAIT_MS`].
fn idle_wait() {
    // Relaxed: see `wake`. A wake between the store and the wait changes
    // the word, and the wait returns at once.
    STATE.store(RUNNING | WAITING, Ordering::Relaxed);
    let ts = libc::timespec {
        tv_sec: libc::time_t::from(IDLE_WAIT_MS / 1000),
        tv_nsec: 0,
    };
    // SAFETY: a futex wait on a static word with a valid timeout; returns
    // at once if the word no longer says waiting.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            STATE.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            RUNNING | WAITING,
            &ts,
        )
    };
    STATE.store(RUNNING, Ordering::Relaxed);
}

/// Wakes the thread waiting on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: a futex wake on a static word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1u32,
        )
    };
}

/// Sleeps `ms` milliseconds.
fn sleep_ms(ms: u32) {
    let mut ts = libc::timespec {
        tv_sec: libc::time_t::from(ms / 1000),
        tv_nsec: libc::c_long::from(ms % 1000) * 1_000_000,
    };
    // SAFETY: valid timespecs; interrupted sleeps go on with the rest.
    while unsafe { libc::nanosleep(&ts, &mut ts) } != 0 && sys::errno() == libc::EINTR {}
}

/// Before `fork`: no sweep may hold a list or a claim in the child.
extern "C" fn prepare() {
    // Relaxed: asks a sweep to stop early; the lock synchronizes.
    purge::FORKING.fetch_add(1, Ordering::Relaxed);
    purge::lock();
}

/// After `fork`, in the parent.
extern "C" fn parent() {
    purge::unlock();
    // Relaxed: as in `prepare`.
    purge::FORKING.fetch_sub(1, Ordering::Relaxed);
}

/// After `fork`, in the child: it has no purging thread.
extern "C" fn child() {
    purge::reset_after_fork();
    // Relaxed: the child has one thread.
    STATE.store(NONE, Ordering::Relaxed);
}
