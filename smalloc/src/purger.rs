//! The background thread that runs the purge's sweeps
//! ([`purge`](crate::purge)): started by the first cold path that may leave
//! something to give back (a free onto a shared list, a thread's end) once
//! a second thread has allocated (or by the sweep of the one thread that
//! allocates, once the process has others), it sleeps a purge delay,
//! sweeps, nudges the owners that took no cold path since the sweep before
//! ([`nudge`](crate::nudge)), and repeats while lists change; when a sweep
//! finds nothing new it waits until a cold path wakes it (or a second
//! passes). A thread's end cuts
//! the wait short: the slabs whose owner ended are swept [`ENDED_DELAY_MS`]
//! later ([`purge::ended_sweep`]). A process in which one
//! thread ever allocated and no other exists has none unless it asks
//! ([`wanted`]; a program may also ask for none at all): a second thread
//! would make `unshare(CLONE_NEWUSER)` fail and Python warn at
//! `os.fork()`. It sweeps on its own cold frees and refills
//! ([`purge::cold_tick_freed`], [`purge::cold_tick_refill`]).
//!
//! It never allocates, holds no lock of the C library, and has every
//! signal blocked. Across `fork` (`pthread_atfork`): the forking thread
//! takes the sweep lock first, so no sweep holds a list or a claim in the
//! child; the child has no purger, and the next cold path that needs one
//! starts it.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

use crate::{occupancy, purge, sys};

/// No thread yet (or, in a fork child, none any more).
const NONE: u32 = 0;
/// A thread is being started.
const STARTING: u32 = 1;
/// The thread runs.
const RUNNING: u32 = 2;
/// The C library refused a thread, or the program asked for none: purges
/// happen on request only (and on the cold paths of a process where one
/// thread allocates).
const FAILED: u32 = 3;
/// With [`RUNNING`]: the thread waits for a wake (the word is its futex).
const WAITING: u32 = 4;
/// With [`RUNNING`]: a thread ended since the last sweep of the slabs
/// whose owner ended.
const ENDED: u32 = 8;

/// The thread's state: one word, so that a cold free reads one line.
static STATE: AtomicU32 = AtomicU32::new(NONE);

/// How long the thread waits when a sweep found nothing new, unless woken.
const IDLE_WAIT_MS: u32 = 1000;

/// How long after a thread's end its slab is swept (at most the purge
/// delay): time for a program that replaces its threads to take the slab
/// up again. Measured: docs/decisions.md ("Slabs of threads that
/// ended").
const ENDED_DELAY_MS: u32 = 10;

/// A thread that ends within this long of a thread's start (its own, too)
/// is taken for a program that replaces its threads, whose next ones reuse
/// what it freed: its slab waits out the usual delay, not
/// [`ENDED_DELAY_MS`]. Measured: docs/decisions.md ("Slabs of threads that
/// ended").
const CHURN_MS: u32 = 50;

/// Whether the purging thread runs and does not wait (one load).
#[inline(always)]
pub fn runs() -> bool {
    // Relaxed: a hint.
    STATE.load(Ordering::Relaxed) & !ENDED == RUNNING
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
    if s & !ENDED == RUNNING | WAITING {
        // Relaxed: the futex word itself is the synchronization.
        if STATE
            .compare_exchange(s, s & !WAITING, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            futex_wake(&STATE);
        }
        return true;
    }
    if s == NONE
        && !cfg!(miri)
        && (occupancy::many_threads_seen() || wanted())
        && purge::delay_ms() != 0
    {
        start();
    }
    running()
}

/// Whether the thread runs (sweeping, asleep or waiting for a wake).
fn running() -> bool {
    // Relaxed: a hint.
    STATE.load(Ordering::Relaxed) & !(WAITING | ENDED) == RUNNING
}

/// Whether the thread was ever started (or refused) in this process.
#[inline]
pub fn started() -> bool {
    // Relaxed: a hint.
    STATE.load(Ordering::Relaxed) != NONE
}

/// [`SETTING`]: the thread as this file decides (the default).
const AUTO: u8 = 0;
/// [`SETTING`]: also where one thread allocates.
const ALWAYS: u8 = 1;
/// [`SETTING`]: never (the process then sweeps as one with a thread the C
/// library refused).
const NEVER: u8 = 2;
/// [`SETTING`] before the environment was read.
const UNREAD: u8 = 3;

/// Whether the program asked for the thread also where one thread
/// allocates, or for none at all: `SMALLOC_PURGE_THREAD` `1` or `0` (read
/// with `secure_getenv` on first use), or [`want`].
static SETTING: AtomicU8 = AtomicU8::new(UNREAD);

/// The program's [`SETTING`], read on first use.
fn setting() -> u8 {
    // Relaxed: a setting; nothing is published with it.
    let s = SETTING.load(Ordering::Relaxed);
    if s != UNREAD {
        return s;
    }
    let env = match sys::env(c"SMALLOC_PURGE_THREAD") {
        _ if cfg!(miri) => AUTO,
        Some(b"1") => ALWAYS,
        Some(b"0") => NEVER,
        _ => AUTO,
    };
    // A `want` meanwhile wins. Relaxed: as above.
    let _ = SETTING.compare_exchange(UNREAD, env, Ordering::Relaxed, Ordering::Relaxed);
    SETTING.load(Ordering::Relaxed)
}

/// Whether the program asked for the thread where one thread allocates
/// (then that thread's first sweep starts it). Cold paths only.
pub fn wanted() -> bool {
    setting() == ALWAYS
}

/// The program asks for the thread in any process: started now unless
/// purging is off (a delay of 0; it then starts when a delay is set).
/// Returns whether it runs.
pub fn want() -> bool {
    // Relaxed: as in `setting`.
    SETTING.store(ALWAYS, Ordering::Relaxed);
    if !cfg!(miri) && purge::delay_ms() != 0 {
        start();
    }
    running()
}

/// Called when a thread that allocated ends: the running thread sweeps the
/// slabs whose owner ended soon ([`ENDED_DELAY_MS`]), not a whole delay
/// later, unless a thread started within [`CHURN_MS`]; otherwise as
/// [`wake`]. Not on any allocation path.
pub fn thread_ended() {
    if occupancy::started_within(CHURN_MS) {
        wake();
        return;
    }
    // Relaxed: the futex word itself is the synchronization.
    if wake() && STATE.fetch_or(ENDED, Ordering::Relaxed) & ENDED == 0 {
        futex_wake(&STATE);
    }
}

/// Whether the `fork` handlers were registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Starts the thread (once; again in a fork child). Also called by the
/// sweep of the one thread that allocates once others exist: the thread
/// then sweeps beside it and nudges it ([`nudge`](crate::nudge)).
#[cold]
#[inline(never)]
pub fn start() {
    // Relaxed: only decides who starts it.
    if STATE
        .compare_exchange(NONE, STARTING, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    if setting() == NEVER {
        // Relaxed: as below.
        STATE.store(FAILED, Ordering::Relaxed);
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
/// found nothing new. A thread's end, meanwhile, brings a sweep of the
/// slabs whose owner ended forward.
extern "C" fn run(_: *mut c_void) -> *mut c_void {
    let (mut last, mut last_ended) = (sys::coarse_ms(), 0);
    loop {
        let delay = purge::delay_ms();
        if delay == 0 {
            idle_wait();
            continue;
        }
        let next = last + u64::from(delay);
        if nap_until(next) {
            // At most one such sweep a delay: a program that replaces its
            // threads all the time gets no more sweeps than twice the usual.
            let now = sys::coarse_ms();
            let soon = now + u64::from(ENDED_DELAY_MS.min(delay));
            let at = (last_ended + u64::from(delay)).min(next).max(soon);
            sleep_ms((at - now) as u32);
            // Relaxed: see `thread_ended`. An end from here on asks again.
            STATE.fetch_and(!ENDED, Ordering::Relaxed);
            if purge::delay_ms() != 0 {
                purge::ended_sweep();
            }
            last_ended = sys::coarse_ms();
            continue;
        }
        // A delay of 0 set while this thread slept means never, from then on.
        if purge::delay_ms() == 0 {
            continue;
        }
        let swept = purge::background_sweep(purge::LOCK_WAIT_MS);
        crate::nudge::idle_owners(purge::epoch());
        if !swept.pending {
            idle_wait();
        }
        last = sys::coarse_ms();
    }
}

/// Sleeps until `deadline` (coarse monotonic milliseconds), or until a
/// thread ends; says whether one did.
fn nap_until(deadline: u64) -> bool {
    loop {
        // Relaxed: see `thread_ended`.
        let s = STATE.load(Ordering::Relaxed);
        if s & ENDED != 0 {
            return true;
        }
        let now = sys::coarse_ms();
        if now >= deadline || futex_wait(s, deadline - now) {
            return false;
        }
    }
}

/// Waits until woken, or [`IDLE_WAIT_MS`], or a thread ends.
fn idle_wait() {
    // Relaxed: see `wake`. A wake between this and the wait changes the
    // word, and the wait returns at once.
    let s = STATE.fetch_or(WAITING, Ordering::Relaxed) | WAITING;
    if s & ENDED == 0 {
        futex_wait(s, u64::from(IDLE_WAIT_MS));
    }
    // Relaxed: as above.
    STATE.fetch_and(!WAITING, Ordering::Relaxed);
}

/// Waits on [`STATE`] while it reads `expected`, at most `ms` milliseconds;
/// says whether the time ran out.
fn futex_wait(expected: u32, ms: u64) -> bool {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: a futex wait on a static word with a valid timeout; returns
    // at once if the word no longer reads `expected`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            STATE.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts,
        )
    };
    rc != 0 && sys::errno() == libc::ETIMEDOUT
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
