/* cache-scratch: passive false sharing (after the Hoard paper, Berger et
 * al., ASPLOS 2000). The main thread allocates one small object per worker,
 * back to back, so neighbours likely share a cache line, and hands them
 * out. Each worker frees its object, then repeatedly allocates an object of
 * the same size, writes every byte of it many times, and frees it. An
 * allocator that gives a worker back the memory it just freed keeps the
 * workers writing to one line. The total number of objects is split over
 * the threads. */
#include "common.h"

static const char *usage =
    "usage: cache-scratch [-t threads] [-n objects in total] [-w writes per byte]\n"
    "                     [-s object size]\n"
    "  defaults -t 2 -n 1M -w 100 -s 8\n";

static size_t per_thread, writes, size;

typedef struct {
    unsigned char *first;
} worker_t;

static void write_all(volatile unsigned char *p) {
    for (size_t w = 0; w < writes; w++)
        for (size_t k = 0; k < size; k++) p[k] = (unsigned char)(p[k] + 1);
}

static void *worker(void *arg) {
    worker_t *me = arg;
    write_all(me->first);
    free(me->first);
    for (size_t i = 0; i < per_thread; i++) {
        unsigned char *p = xmalloc(size);
        write_all(p);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads;
    int bad = parse_cache_opts(argc, argv, "cache-scratch", usage, &threads, &per_thread, &writes, &size);
    if (bad) return bad;
    worker_t *w = xmalloc(sizeof(worker_t) * (size_t)threads);
    for (int i = 0; i < threads; i++) {
        w[i].first = xmalloc(size);
        memset(w[i].first, 0, size);
    }
    double start = now_sec();
    run_threads(threads, worker, w, sizeof *w);
    double secs = now_sec() - start;
    free(w);
    printf("cache-scratch: threads=%d objects=%zu writes=%zu size=%zu secs=%.3f\n", threads,
           per_thread * (size_t)threads, writes, size, secs);
    return 0;
}
