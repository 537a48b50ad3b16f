//! Freed memory given back without a call from the program, under
//! `LD_PRELOAD`: bench/preload's peakfree (threads build a peak of mixed
//! blocks, free them all and end; the program then watches its resident
//! set) with a generous bound, and the thread and fork programs with a
//! sweep every millisecond.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The C file `src` compiled to `exe` with `-O2 -fno-builtin` (so that no
/// allocation the test relies on is optimized out) and `-pthread`.
fn cc(src: &Path, exe: &Path) {
    let out = Command::new(devutils::target_cc(false))
        .args([
            "-O2",
            "-std=gnu11",
            "-fno-builtin",
            "-pthread",
            "-Wall",
            "-Werror",
            "-o",
        ])
        .arg(exe)
        .arg(src)
        .output()
        .expect("run the C compiler (is cc installed?)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// bench/preload/peakfree.c, compiled into `dir`.
fn peakfree(dir: &Path) -> PathBuf {
    let exe = dir.join("peakfree");
    cc(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/preload/peakfree.c"),
        &exe,
    );
    exe
}

#[test]
fn a_peak_freed_is_given_back_within_a_second() {
    let dir = scratch_dir("purge-peakfree");
    let exe = peakfree(&dir);
    // The target is below 10% of the peak; the bound leaves room for a
    // loaded machine. Idle after the frees, then with one thread still
    // allocating and freeing small blocks.
    for extra in [&[][..], &["-c"][..]] {
        let out = run_ok(
            preloaded(&mut target_command(&exe))
                .args(["-t", "4", "-m", "256M", "-s", "1.2", "-b", "40"])
                .args(extra),
        );
        println!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn a_program_with_one_thread_that_asked_for_the_purging_thread_gets_its_peak_back_while_it_sleeps()
{
    let dir = scratch_dir("purge-peakfree-one-thread");
    let exe = peakfree(&dir);
    let run = |asked: bool, bound: &str| {
        let mut cmd = target_command(&exe);
        // A delay of 100 ms: two sweeps well within the second, on a
        // loaded machine too.
        preloaded(&mut cmd)
            .args(["-t", "0", "-m", "256M", "-s", "1.2", "-b", bound])
            .env("SMALLOC_PURGE_DELAY_MS", "100");
        if asked {
            cmd.env("SMALLOC_PURGE_THREAD", "1");
        }
        let out = cmd.output().expect("run peakfree");
        println!("{}", String::from_utf8_lossy(&out.stdout));
        out.status.code()
    };
    // Unasked, nothing sweeps while the one thread sleeps: what its frees
    // gave back as its heap shrank goes, the slots below 64 KiB and the
    // first 16 MiB of large ones stay (about a fifth; peakfree's -b fails),
    // which shows the bound can fail.
    assert_eq!(run(false, "15"), Some(1));
    assert_eq!(run(true, "15"), Some(0));
}

#[test]
fn a_program_with_one_thread_gives_large_slots_back_as_its_heap_shrinks() {
    let dir = scratch_dir("purge-peakfree-shrinks");
    let exe = peakfree(&dir);
    // No purging thread, and no cold path after the frees: nothing but the
    // frees themselves gives back (all was kept before).
    let out = run_ok(
        preloaded(&mut target_command(&exe))
            .args(["-t", "0", "-m", "256M", "-s", "1.2", "-b", "40"])
            .env("SMALLOC_PURGE_THREAD", "0"),
    );
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

/// Rounds of buffers allocated, written and freed, for the programs below.
/// After [`STATUS_C`].
const ROUNDS_C: &str = r#"
#include <sys/resource.h>

static long faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

/* `rounds` rounds of `n` blocks of `size` bytes allocated, written whole and
 * freed. Returns the page faults of the last ten rounds (all rounds when
 * `rounds` is 1), after printing them with the process's thread count,
 * which goes to `*threads`. */
static long rounds_of(int n, size_t size, int rounds, long *threads) {
    static char *p[64];
    long before = faults();
    for (int r = 0; r < rounds; r++) {
        if (r == rounds - 10) before = faults();
        for (int i = 0; i < n; i++) {
            p[i] = malloc(size);
            memset(p[i], r + 1, size);
        }
        for (int i = 0; i < n; i++) free(p[i]);
    }
    long late = faults() - before;
    *threads = status("Threads:");
    printf("faults in the last 10 rounds %ld threads %ld\n", late, *threads);
    return late;
}
"#;

/// The one-thread program `main_c` (after [`STATUS_C`] and [`ROUNDS_C`]),
/// compiled as `name` and run under smalloc; it fails unless it kept what
/// it checks.
fn one_thread_rounds(name: &str, main_c: &str) {
    let exe = one_thread_program(name, &format!("{ROUNDS_C}{main_c}"));
    let out = run_ok(preloaded(&mut target_command(&exe)));
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_program_with_one_thread_that_rebuilds_its_buffers_keeps_them() {
    // 48 MiB of 1 MiB buffers built and freed, over and over: the first
    // rounds give some back as they free, the later ones keep them (the
    // memory came back at once). A round faulting its buffers in again:
    // 12,288 faults.
    one_thread_rounds(
        "rebuilds",
        r#"
int main(void) {
    long threads, late = rounds_of(48, 1 << 20, 20, &threads);
    return !(threads == 1 && late < 2000);
}
"#,
    );
}

#[test]
fn a_program_with_one_thread_that_shrank_keeps_the_buffers_it_loops_over() {
    // A peak of 64 MiB of 1 MiB blocks freed (past the first 16 MiB, the
    // frees give their pages back), then four buffers of 1 MiB freed and
    // allocated again each round: they stay. A round faulting its buffers
    // in again: 1,024 faults.
    one_thread_rounds(
        "after-shrinking",
        r#"
int main(void) {
    long threads;
    rounds_of(64, 1 << 20, 1, &threads);
    long late = rounds_of(4, 1 << 20, 20, &threads);
    return !(threads == 1 && late < 500);
}
"#,
    );
}

#[test]
fn a_program_with_one_thread_whose_requests_take_larger_freed_slots_keeps_them() {
    // Three requests of 2 MiB a round take freed slots of 4 MiB (a larger
    // class's freed slots before new memory) and free them again: the
    // slots' frees count 4 MiB each, and so must their allocations, or the
    // count drifts up by 2 MiB a round until every free gives its pages
    // back. A round faulting its blocks in again: 1,536 faults.
    one_thread_rounds(
        "borrows-larger",
        r#"
int main(void) {
    long threads;
    rounds_of(3, 4 << 20, 1, &threads);
    long late = rounds_of(3, 2 << 20, 40, &threads);
    return !(threads == 1 && late < 500);
}
"#,
    );
}

/// Runs the test program `file` with a sweep every millisecond; it prints
/// `expect` when its checks pass.
fn with_a_sweep_every_millisecond(file: &str, expect: &str) {
    let dir = scratch_dir(&format!("purge-{expect}").replace(' ', "-"));
    let exe = compile(&dir, file, &["-O2"]);
    let out = run_ok(preloaded(&mut target_command(&exe)).env("SMALLOC_PURGE_DELAY_MS", "1"));
    assert!(String::from_utf8_lossy(&out.stdout).contains(expect));
}

#[test]
fn threads_with_a_sweep_every_millisecond() {
    // The purge racing allocations and frees (the stress program checks
    // every block's contents).
    with_a_sweep_every_millisecond("stress.c", "stress ok");
}

#[test]
fn one_thread_churning_with_a_sweep_every_millisecond() {
    // The sweeps of a process with one thread give back the idle slots of
    // lists in use (the program checks every block's contents, and that no
    // two live blocks overlap).
    with_a_sweep_every_millisecond("single_churn.c", "single churn ok");
}

#[test]
fn one_thread_churning_with_only_its_claims_giving_back() {
    // No sweep comes within a purge delay of an hour: the releases on the
    // program's claims sweep the small classes it left (spans given back,
    // regions reset; the program checks every block's contents).
    let dir = scratch_dir("purge-single-churn-claims");
    let exe = compile(&dir, "single_churn.c", &["-O2"]);
    let out = run_ok(
        preloaded(&mut target_command(&exe))
            .env("SMALLOC_PURGE_DELAY_MS", "3600000")
            .env("SMALLOC_STATS", "1"),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("single churn ok"));
    let report = String::from_utf8_lossy(&out.stderr);
    let count = |what: &str| -> u64 {
        let line = report.lines().find(|l| l.contains(what)).expect(what);
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let swept = count("Spans of freed slots given back by purges")
        + count("Regions reset to never-used by purges");
    assert!(swept > 0, "no small class swept on claims:\n{report}");
}

#[test]
fn fork_with_a_sweep_every_millisecond() {
    with_a_sweep_every_millisecond("fork.c", "fork ok");
}

/// What the one-thread programs below share: the C headers and
/// `status(key)`, a number from `/proc/self/status`.
const STATUS_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long status(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) v = atol(line + n);
    if (f) fclose(f);
    return v;
}
"#;

/// The one-thread program `main_c` (after [`STATUS_C`]) compiled in a
/// scratch directory of its own, `name`.
fn one_thread_program(name: &str, main_c: &str) -> PathBuf {
    let dir = scratch_dir(&format!("purge-{name}"));
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, format!("{STATUS_C}{main_c}")).unwrap();
    let exe = dir.join(name);
    cc(&src, &exe);
    exe
}

/// Runs `exe` preloaded with a purge delay of `ms` milliseconds; it exits
/// 0 when its checks pass. Prints its line of figures.
fn run_with_delay(exe: &Path, ms: &str) {
    let out = run_ok(preloaded(&mut target_command(exe)).env("SMALLOC_PURGE_DELAY_MS", ms));
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

/// A program with one thread: it frees a peak of large blocks, then only
/// allocates and frees one block of 1 MiB every 20 ms (a class that does
/// not borrow the freed 256 KiB slots: a list whose head is in use is not
/// quiet, and is not swept). After [`STATUS_C`].
const SINGLE: &str = r#"
int main(void) {
    enum { N = 800, SIZE = 256 << 10 };
    static char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(SIZE);
        memset(p[i], 1, SIZE);
    }
    long peak = status("VmRSS:");
    for (int i = 0; i < N; i++) free(p[i]);
    for (int i = 0; i < 50; i++) {
        usleep(20000);
        char *q = malloc(1 << 20);
        memset(q, 2, 1 << 20);
        free(q);
    }
    long after = status("VmRSS:"), threads = status("Threads:");
    printf("peak %ld after %ld threads %ld\n", peak, after, threads);
    return !(threads == 1 && after * 10 < peak);
}
"#;

/// A program with one thread that frees a peak of small blocks on its hot
/// path (onto its private lists), then allocates another size, which it
/// keeps, 50 KB every 10 ms for up to `steps` steps (what they take is
/// left out of the resident set it checks): its refills sweep. With `used` above 0 it also takes and frees
/// that many blocks of the freed size at each step, so their list is never
/// quiet and only its idle slots can go back; with 0 the region of the
/// freed size is reset. After [`STATUS_C`].
fn single_refills(used: usize, steps: usize) -> String {
    format!(
        r#"
int main(void) {{
    enum {{ N = 20000, SIZE = 3000, STEPS = {steps}, PER_STEP = 500, SMALL = 100, USED = {used} }};
    static char *p[N], *q[STEPS * PER_STEP];
    for (int i = 0; i < N; i++) {{
        p[i] = malloc(SIZE);
        memset(p[i], 1, SIZE);
    }}
    long peak = status("VmRSS:");
    for (int i = 0; i < N; i++) free(p[i]);
    long after = peak;
    for (int s = 0; s < STEPS && after * 2 >= peak; s++) {{
        usleep(10000);
        for (int i = 0; i < USED; i++) {{
            p[i] = malloc(SIZE);
            memset(p[i], 3, SIZE);
        }}
        for (int i = 0; i < USED; i++) free(p[i]);
        for (int i = 0; i < PER_STEP; i++) {{
            q[s * PER_STEP + i] = malloc(SMALL);
            memset(q[s * PER_STEP + i], 2, SMALL);
        }}
        /* Less what the kept blocks take. */
        after = status("VmRSS:") - (long)(s + 1) * PER_STEP * SMALL / 1024;
    }}
    long threads = status("Threads:");
    printf("peak %ld after %ld threads %ld\n", peak, after, threads);
    return !(threads == 1 && after * 2 < peak);
}}
"#
    )
}

#[test]
fn a_program_with_one_thread_gives_back_idle_slots_of_a_size_it_keeps_using() {
    let exe = one_thread_program("single-in-use", &single_refills(8, 100));
    run_with_delay(&exe, "20");
}

#[test]
fn a_program_with_one_thread_sweeps_on_its_refills() {
    let exe = one_thread_program("single-refills", &single_refills(0, 100));
    run_with_delay(&exe, "20");
}

/// With a 2 s delay, the program of [`single_refills`] (growing 5 MB/s
/// in another size while it keeps using 8 of the freed blocks) sweeps
/// every eighth of the delay: its freed peak goes back within 2 s, where
/// sweeps a whole delay apart would give it back after 4 s at the soonest.
#[test]
fn a_program_with_one_thread_sweeps_sooner_while_it_grows() {
    let exe = one_thread_program("single-growing", &single_refills(8, 200));
    run_with_delay(&exe, "2000");
}

/// A program with one thread frees a peak of small blocks of two sizes
/// on its hot path (onto its private lists), then at once claims 6 MB of
/// new memory in a third size, which it keeps, without a pause: with a
/// purge delay of an hour no sweep comes, so only its claims give the freed
/// slots back (their lists unchanged between two releases). It also takes
/// and frees the same 8 blocks of the first size between claims, which
/// leaves that private list's head as it was. After [`STATUS_C`].
const SINGLE_PHASES: &str = r#"
int main(void) {
    enum { N = 6000, SIZE = 1000, SIZE2 = 120, KEPT = 60000, SMALL = 100 };
    static char *p[N], *p2[N * 8], *q[KEPT];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(SIZE);
        memset(p[i], 1, SIZE);
    }
    for (int i = 0; i < N * 8; i++) {
        p2[i] = malloc(SIZE2);
        memset(p2[i], 4, SIZE2);
    }
    long peak = status("VmRSS:");
    for (int i = 0; i < N; i++) free(p[i]);
    for (int i = 0; i < N * 8; i++) free(p2[i]);
    for (int i = 0; i < KEPT; i++) {
        if (i % 1000 == 0) {
            for (int j = 0; j < 8; j++) {
                p[j] = malloc(SIZE);
                memset(p[j], 3, SIZE);
            }
            for (int j = 0; j < 8; j++) free(p[j]);
        }
        q[i] = malloc(SMALL);
        memset(q[i], 2, SMALL);
    }
    /* Less what the kept blocks take. */
    long after = status("VmRSS:") - (long)KEPT * SMALL / 1024;
    long threads = status("Threads:");
    printf("peak %ld after %ld threads %ld\n", peak, after, threads);
    for (int i = 0; i < KEPT; i++) free(q[i]);
    return !(threads == 1 && after * 2 < peak);
}
"#;

/// [`SINGLE_PHASES`]: the freed peak goes back as the program claims new
/// memory, long before the purge delay.
#[test]
fn a_program_with_one_thread_gives_back_the_sizes_it_stopped_using_as_it_grows() {
    let exe = one_thread_program("single-phases", SINGLE_PHASES);
    run_with_delay(&exe, "3600000");
}

#[test]
fn a_program_with_one_thread_gets_no_thread_and_sweeps_on_its_frees() {
    let exe = one_thread_program("single", SINGLE);
    let out = run_ok(preloaded(&mut target_command(&exe)));
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

/// Two threads allocate; the second frees the first's blocks (cold frees,
/// which start the purging thread where it may run) and ends. Prints
/// whether a thread named `smalloc-purge` exists afterwards. After
/// [`STATUS_C`].
const TWO_THREADS: &str = r#"
#include <dirent.h>
#include <pthread.h>

enum { N = 20000 };
static char *p[N];

static void *freer(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        char *q = malloc(100);
        free(q);
        free(p[i]);
    }
    return NULL;
}

static int purging_thread(void) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f) && !strcmp(comm, "smalloc-purge\n")) found = 1;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return found;
}

int main(void) {
    pthread_t t;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(64 << (i % 8));
        memset(p[i], 1, 64);
    }
    if (pthread_create(&t, NULL, freer, NULL) || pthread_join(t, NULL)) return 2;
    usleep(100000);
    char *q = malloc(64);
    memset(q, 2, 64);
    free(q);
    printf("purging thread %d\n", purging_thread());
    fprintf(stderr, "threads %ld\n", status("Threads:"));
    return 0;
}
"#;

#[test]
fn a_program_that_asks_for_no_purging_thread_gets_none() {
    let exe = one_thread_program("no-thread", TWO_THREADS);
    let run = |env: Option<&str>| {
        let mut cmd = target_command(&exe);
        preloaded(&mut cmd);
        if let Some(v) = env {
            cmd.env("SMALLOC_PURGE_THREAD", v);
        }
        String::from_utf8(run_ok(&mut cmd).stdout).unwrap()
    };
    // Unasked, the second thread's frees start it; asked for none, nothing.
    assert_eq!(run(None), "purging thread 1\n");
    assert_eq!(run(Some("0")), "purging thread 0\n");
}

/// A server's shape: one thread allocates; another (an I/O thread) exists
/// and never allocates. The first frees a peak of small blocks on its hot
/// path (onto its private lists), then only allocates and frees one small
/// block every 10 ms, from a list that never runs dry: no cold path of its
/// own ever hands the peak over. After [`STATUS_C`].
const SERVER: &str = r#"
#include <pthread.h>

static int pipefd[2];

static void *idle_thread(void *arg) {
    char c;
    (void)arg;
    return read(pipefd[0], &c, 1) < 0 ? NULL : NULL;
}

int main(void) {
    enum { N = 40000, SIZE = 2000 };
    static char *p[N];
    pthread_t t;
    if (pipe(pipefd) || pthread_create(&t, NULL, idle_thread, NULL)) return 2;
    /* As a server starts its threads and then works: the library looks
       at the thread count at most once a delay, on a cold path. */
    usleep(100000);
    char *warm = malloc(64);
    free(warm);
    /* What the process holds besides the peak (under qemu-user, the
       emulator's own memory too). */
    long base = status("VmRSS:");
    for (int i = 0; i < N; i++) {
        p[i] = malloc(SIZE);
        memset(p[i], 1, SIZE);
    }
    long peak = status("VmRSS:");
    for (int i = 0; i < N; i++) free(p[i]);
    long after = peak;
    for (int i = 0; i < 500 && (after - base) * 10 >= peak - base; i++) {
        usleep(10000);
        char *q = malloc(64);
        memset(q, 2, 64);
        free(q);
        after = status("VmRSS:");
    }
    long threads = status("Threads:");
    printf("base %ld peak %ld after %ld threads %ld\n", base, peak, after, threads);
    if (write(pipefd[1], "x", 1) != 1 || pthread_join(t, NULL)) return 2;
    return !(threads >= 2 && (after - base) * 10 < peak - base);
}
"#;

#[test]
fn a_server_thread_that_frees_on_its_hot_path_and_goes_on_gives_the_peak_back() {
    // The purge's thread starts beside the idle thread, and nudges the
    // allocating thread's next allocation onto its cold path, which hands
    // its private lists over (the program waits up to 5 s).
    let exe = one_thread_program("server", SERVER);
    run_with_delay(&exe, "50");
}
