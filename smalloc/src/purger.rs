//! The background thread that runs the purge's sweeps
//! ([`purge`](crate::purge)): started by the first cold path that may leave
//! something to give back (a free onto a shared list, a thread's end), it
//! sleeps a purge delay, sweeps, and repeats while lists change; when a
//! sweep finds nothing new it waits until a cold path wakes it (or a
//! second passes).
//!
//! It never allocates, holds no lock of the C library, and has every
//! signal blocked. Across `fork` (`pthread_atfork`): the forking thread
//! takes the sweep lock first, so no sweep holds a list or a claim in the
//! child; the child has no purger, and the next cold path that needs one
//! starts it.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::{purge, sys};

/// No thread yet (or, in a fork child, none any more).
const NONE: u32 = 0;
/// A thread is being started.
const STARTING: u32 = 1;
/// The thread runs.
const RUNNING: u32 = 2;
/// The C library refused a thread: purges happen on request only.
const FAILED: u32 = 3;

/// The thread's state.
static STATE: AtomicU32 = AtomicU32::new(NONE);

/// 1 while the thread waits for a wake (a futex word).
static WAITING: AtomicU32 = AtomicU32::new(0);

/// How long the thread waits when a sweep found nothing new, unless woken.
const IDLE_WAIT_MS: u32 = 1000;

/// Wakes the purging thread if it waits, or starts it if purging is on and
/// it never ran. Cold paths only.
#[inline]
pub fn wake() {
    // Relaxed: a hint.
    if STATE.load(Ordering::Relaxed) == NONE && !cfg!(miri) && purge::delay_ms() != 0 {
        start();
    }
    nudge();
}

/// Wakes the purging thread if it waits.
#[inline]
pub fn nudge() {
    // Relaxed: hints; a lost wake costs at most one idle wait.
    if WAITING.load(Ordering::Relaxed) != 0 && WAITING.swap(0, Ordering::Relaxed) != 0 {
        futex_wake(&WAITING);
    }
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
    // Relaxed: the state is a hint for `wake`.
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
    // Relaxed: see `wake`.
    WAITING.store(1, Ordering::Relaxed);
    let ts = libc::timespec {
        tv_sec: libc::time_t::from(IDLE_WAIT_MS / 1000),
        tv_nsec: 0,
    };
    // SAFETY: a futex wait on a static word with a valid timeout; returns
    // at once if the word is no longer 1.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WAITING.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            1u32,
            &ts,
        )
    };
    WAITING.store(0, Ordering::Relaxed);
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
    WAITING.store(0, Ordering::Relaxed);
}
