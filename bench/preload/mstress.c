/* mstress: a mixed-size multi-threaded stress in the spirit of mimalloc's
 * test-stress. Each round starts fresh threads; each keeps a set of live
 * blocks and, at random, allocates (mostly small sizes, some up to MiBs),
 * frees, reallocates, or swaps a block with a global transfer array, so
 * blocks are freed by other threads and outlive the thread and round that
 * made them. Every block carries its size and a tag in a header and a
 * pattern over its pages, checked before it is freed or passed on. */
#include "common.h"

static const char *usage =
    "usage: mstress [-t threads] [-r rounds] [-n operations per thread per round]\n"
    "               [-l live blocks per thread] [-p transfer slots] [-S max size] [-x seed]\n"
    "  sizes: 16 B-1 KiB (90%), 1-64 KiB (9%), 64 KiB-max (1%), log-uniform in each band\n"
    "  sizes take K/M/G suffixes; defaults -t 2 -r 10 -n 20000 -l 256 -p 1024 -S 4M\n";

typedef struct {
    size_t size;
    uint64_t tag;
} header_t;

enum { HEADER = sizeof(header_t), MIN_SIZE = 16 };

static _Atomic(header_t *) *transfer;
static size_t nslots, ops, live_per_thread, max_size;

typedef struct {
    uint64_t seed;
} worker_t;

static size_t pick_size(rng_t *r) {
    uint64_t band = rng_below(r, 100);
    if (band < 90 || max_size <= 1024) return rng_log_size(r, MIN_SIZE, max_size < 1024 ? max_size : 1024);
    if (band < 99 || max_size <= 65536) return rng_log_size(r, 1024, max_size < 65536 ? max_size : 65536);
    return rng_log_size(r, 65536, max_size);
}

static void fill_block(header_t *h, size_t size, uint64_t tag) {
    h->size = size;
    h->tag = tag;
    if (size > HEADER) fill((unsigned char *)h + HEADER, size - HEADER, tag);
}

static void check_block(header_t *h) {
    if (h->size < MIN_SIZE || h->size > max_size) die("mstress: block header overwritten");
    if (h->size > HEADER) check((unsigned char *)h + HEADER, h->size - HEADER, h->tag, "mstress");
}

static header_t *new_block(rng_t *r) {
    size_t size = pick_size(r);
    header_t *h = xmalloc(size);
    fill_block(h, size, rng_next(r));
    return h;
}

static void free_block(header_t *h) {
    if (!h) return;
    check_block(h);
    free(h);
}

static void *worker(void *arg) {
    worker_t *me = arg;
    rng_t r;
    rng_seed(&r, me->seed);
    header_t **live = calloc(live_per_thread, sizeof *live);
    if (!live) die("calloc failed");
    for (size_t i = 0; i < ops; i++) {
        size_t k = (size_t)rng_below(&r, live_per_thread);
        uint64_t what = rng_below(&r, 100);
        if (what < 50) {
            free_block(live[k]);
            live[k] = new_block(&r);
        } else if (what < 70) {
            free_block(live[k]);
            live[k] = NULL;
        } else if (what < 85 && live[k]) {
            /* realloc keeps the header and the first pattern word; refill
             * for the new size. */
            check_block(live[k]);
            size_t size = pick_size(&r);
            header_t *h = realloc(live[k], size);
            if (!h) die("realloc failed");
            if (h->size > HEADER + 16 && size > HEADER + 16) {
                uint64_t w;
                memcpy(&w, (unsigned char *)h + HEADER, 8);
                if (w != pattern_word(h->tag, 0)) die("mstress: realloc lost the contents");
            }
            fill_block(h, size, rng_next(&r));
            live[k] = h;
        } else {
            if (live[k]) check_block(live[k]);
            size_t s = (size_t)rng_below(&r, nslots);
            live[k] = atomic_exchange_explicit(&transfer[s], live[k], memory_order_acq_rel);
        }
    }
    /* A quarter of the survivors go to the transfer array for later rounds
     * (freeing what they displace); the rest are freed here. */
    for (size_t k = 0; k < live_per_thread; k++) {
        if (live[k] && rng_below(&r, 4) == 0) {
            size_t s = (size_t)rng_below(&r, nslots);
            free_block(atomic_exchange_explicit(&transfer[s], live[k], memory_order_acq_rel));
        } else {
            free_block(live[k]);
        }
    }
    free(live);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, rounds = 10, opt;
    uint64_t seed = 1;
    ops = 20000, live_per_thread = 256, nslots = 1024, max_size = 4 << 20;
    while ((opt = getopt(argc, argv, "t:r:n:l:p:S:x:")) != -1) {
        switch (opt) {
        case 't': threads = (int)parse_size(optarg, usage); break;
        case 'r': rounds = (int)parse_size(optarg, usage); break;
        case 'n': ops = parse_size(optarg, usage); break;
        case 'l': live_per_thread = parse_size(optarg, usage); break;
        case 'p': nslots = parse_size(optarg, usage); break;
        case 'S': max_size = parse_size(optarg, usage); break;
        case 'x': seed = parse_size(optarg, usage); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (threads < 1 || rounds < 1 || live_per_thread < 1 || nslots < 1 || max_size < MIN_SIZE) {
        fputs("mstress: need -t, -r, -l, -p >= 1 and -S >= 16\n", stderr);
        return 2;
    }
    transfer = calloc(nslots, sizeof *transfer);
    if (!transfer) die("calloc failed");
    worker_t *w = xmalloc(sizeof(worker_t) * (size_t)threads);
    double start = now_sec();
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < threads; i++)
            w[i].seed = seed * 1000003 + (uint64_t)round * 7919 + (uint64_t)i;
        run_threads(threads, worker, w, sizeof *w);
    }
    double secs = now_sec() - start;
    for (size_t s = 0; s < nslots; s++) free_block(atomic_load(&transfer[s]));
    free(transfer);
    free(w);
    double total = (double)ops * threads * rounds;
    printf("mstress: threads=%d rounds=%d ops=%.0f secs=%.3f Mops/s=%.2f\n", threads, rounds, total,
           secs, total / secs / 1e6);
    return 0;
}
