/* peakfree: a peak, then everything freed. Threads allocate blocks of
 * mixed sizes (log-uniform, 64 B to 256 KiB by default) until together
 * they hold the peak, touch every page, then free all of them. Then the
 * main thread watches its resident set (VmRSS) for a while: the question
 * is whether the allocator gives the freed memory back without being asked.
 *
 * -t 0: the main thread builds and frees the peak itself (a program with
 * one thread). -w exit: the workers end after their frees (default);
 * -w idle: they stay alive, asleep, until the end. -c: meanwhile the main
 * thread allocates and frees a few small blocks every millisecond (a
 * program that is not quite idle). -b P: exit 1 if the resident set 1 s
 * after the last free is above P percent of the peak (a test's bound).
 * -k N: one block in N stays live to the end (survivors scattered among
 * the freed blocks: the allocator can give back only what lies between
 * them).
 * Prints the peak, the resident set at 0.25, 0.5, 1 s and at the end, in
 * KiB. */
#include "common.h"

static const char *usage =
    "usage: peakfree [-t threads] [-m peak bytes] [-l smallest] [-u largest] [-w exit|idle]\n"
    "                [-s seconds watched] [-c] [-b percent] [-k one in N kept] [-x seed]\n"
    "  defaults -t 4 -m 1G -l 64 -u 256K -w exit -s 2; -t 0: the main thread alone\n";

static size_t peak_bytes, smallest, largest;
static int threads, idle_workers, one_thread;
static size_t keep_one_in;
static atomic_size_t kept_bytes;
static long one_thread_peak;
static atomic_int ready, freed, finished;
static volatile unsigned char sink;

typedef struct {
    uint64_t seed;
} worker_t;

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

static void *worker(void *arg) {
    worker_t *w = arg;
    rng_t r;
    rng_seed(&r, w->seed);
    size_t share = peak_bytes / (size_t)threads, held = 0, n = 0, cap = 1024;
    void **blocks = xmalloc(cap * sizeof *blocks);
    size_t *sizes = xmalloc(cap * sizeof *sizes);
    while (held < share) {
        if (n == cap) {
            cap *= 2;
            blocks = realloc(blocks, cap * sizeof *blocks);
            sizes = realloc(sizes, cap * sizeof *sizes);
            if (!blocks || !sizes) die("peakfree: realloc failed");
        }
        size_t size = rng_log_size(&r, smallest, largest);
        blocks[n] = xmalloc(size);
        sizes[n] = size;
        fill(blocks[n], size, n);
        held += size;
        n++;
    }
    if (one_thread) {
        one_thread_peak = rss_kib();
    } else {
        atomic_fetch_add(&ready, 1);
        while (atomic_load(&ready) < threads) usleep(1000);
    }
    /* Every other block first, then the rest: frees not in allocation order. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = (size_t)pass; i < n; i += 2) {
            check(blocks[i], sizes[i], i, "peakfree");
            if (keep_one_in && i % keep_one_in == 0) {
                atomic_fetch_add(&kept_bytes, sizes[i]);
                continue; /* a survivor: live to the end */
            }
            free(blocks[i]);
        }
    free(blocks);
    free(sizes);
    atomic_fetch_add(&freed, 1);
    while (!one_thread && idle_workers && !atomic_load(&finished)) usleep(10000);
    return NULL;
}

static void *start_workers(void *args) {
    run_threads(threads, worker, args, sizeof(worker_t));
    return NULL;
}

int main(int argc, char **argv) {
    threads = 4;
    peak_bytes = (size_t)1 << 30;
    smallest = 64;
    largest = 256 << 10;
    double watch = 2;
    int churn = 0;
    double bound = 0;
    uint64_t seed = 1;
    int opt;
    while ((opt = getopt(argc, argv, "t:m:l:u:w:s:cb:k:x:")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'm': peak_bytes = parse_size(optarg, usage); break;
        case 'l': smallest = parse_size(optarg, usage); break;
        case 'u': largest = parse_size(optarg, usage); break;
        case 'w':
            if (strcmp(optarg, "exit") && strcmp(optarg, "idle")) die(usage);
            idle_workers = !strcmp(optarg, "idle");
            break;
        case 's': watch = atof(optarg); break;
        case 'c': churn = 1; break;
        case 'b': bound = atof(optarg); break;
        case 'k': keep_one_in = (size_t)atol(optarg); break;
        case 'x': seed = strtoull(optarg, NULL, 10); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    one_thread = threads == 0;
    if (one_thread) threads = 1;
    if (threads < 1 || smallest < 1 || largest < smallest || watch < 1) die(usage);
    worker_t *args = xmalloc(sizeof(worker_t) * (size_t)threads);
    for (int i = 0; i < threads; i++) args[i].seed = seed * 1000 + (uint64_t)i;
    pthread_t runner;
    long peak;
    if (one_thread) {
        worker(args);
        peak = one_thread_peak;
    } else {
        if (pthread_create(&runner, NULL, start_workers, args) != 0) die("pthread_create failed");
        while (atomic_load(&ready) < threads) usleep(1000);
        peak = rss_kib();
        while (atomic_load(&freed) < threads) {
            long now = rss_kib();
            if (now > peak) peak = now;
            usleep(1000);
        }
    }
    double t0 = now_sec();
    if (!one_thread && !idle_workers) pthread_join(runner, NULL);
    long at[3] = {-1, -1, -1}, last = -1;
    const double marks[3] = {0.25, 0.5, 1.0};
    rng_t r;
    rng_seed(&r, seed);
    for (double t = 0; t < watch; t = now_sec() - t0) {
        for (int i = 0; i < 3; i++)
            if (at[i] < 0 && t >= marks[i]) at[i] = rss_kib();
        if (churn)
            for (int i = 0; i < 4; i++) {
                size_t size = rng_range(&r, 16, 256);
                char *p = xmalloc(size);
                fill(p, size, (uint64_t)i);
                sink += (unsigned char)p[size - 1]; /* keeps the pair from being optimized out */
                free(p);
            }
        usleep(1000);
    }
    last = rss_kib();
    atomic_store(&finished, 1);
    if (!one_thread && idle_workers) pthread_join(runner, NULL);
    printf("peak_rss_kib %ld\n", peak);
    if (keep_one_in) printf("kept_kib %zu\n", atomic_load(&kept_bytes) >> 10);
    for (int i = 0; i < 3; i++)
        printf("rss_after_%.2fs_kib %ld (%.1f%% of peak)\n", marks[i], at[i], 100.0 * (double)at[i] / (double)peak);
    printf("rss_at_end_kib %ld (%.1f%% of peak)\n", last, 100.0 * (double)last / (double)peak);
    free(args);
    if (bound > 0 && 100.0 * (double)at[2] / (double)peak > bound) {
        fprintf(stderr, "peakfree: %.1f%% of the peak resident 1 s after the frees (bound %.1f%%)\n",
                100.0 * (double)at[2] / (double)peak, bound);
        return 1;
    }
    return 0;
}
