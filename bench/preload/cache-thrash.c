/* cache-thrash: active false sharing (after the Hoard paper, Berger et al.,
 * ASPLOS 2000). Each thread repeatedly allocates a small object, writes
 * every byte of it many times, and frees it. If the allocator hands two
 * threads objects on the same cache line, that line bounces between cores
 * on every write. The total number of objects is split over the threads. */
#include "common.h"

static const char *usage =
    "usage: cache-thrash [-t threads] [-n objects in total] [-w writes per byte]\n"
    "                    [-s object size]\n"
    "  defaults -t 2 -n 1M -w 100 -s 8\n";

static size_t per_thread, writes, size;

static void *worker(void *arg) {
    (void)arg;
    for (size_t i = 0; i < per_thread; i++) {
        volatile unsigned char *p = xmalloc(size);
        for (size_t w = 0; w < writes; w++)
            for (size_t k = 0; k < size; k++) p[k] = (unsigned char)(p[k] + 1);
        free((void *)p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads;
    int bad = parse_cache_opts(argc, argv, "cache-thrash", usage, &threads, &per_thread, &writes, &size);
    if (bad) return bad;
    double start = now_sec();
    char unused = 0;
    run_threads(threads, worker, &unused, 0);
    double secs = now_sec() - start;
    printf("cache-thrash: threads=%d objects=%zu writes=%zu size=%zu secs=%.3f\n", threads,
           per_thread * (size_t)threads, writes, size, secs);
    return 0;
}
