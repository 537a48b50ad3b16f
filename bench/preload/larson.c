/* larson: a server simulation after Larson & Krishnan ("Memory allocation
 * for long-running server applications", ISMM 1998). A shared array holds
 * live blocks; worker threads repeatedly put a freshly allocated block of
 * random size at a random index and free the block it displaced, which
 * another thread usually allocated. Workers live for one round; each
 * round starts new threads that inherit the array, as the original's
 * threads hand their work to successors. Every block carries its size
 * and a pattern, checked before it is freed. */
#include "common.h"

static const char *usage =
    "usage: larson [-t threads] [-c blocks per thread] [-s min size] [-S max size]\n"
    "              [-n replacements per thread per round] [-r rounds] [-l] [-x seed]\n"
    "  -l: each thread works in its own region of the array (the original's\n"
    "      layout); default: random indices over the whole array\n"
    "  sizes take K/M/G suffixes; defaults -t 2 -c 1000 -s 16 -S 512 -n 200000 -r 5\n";

static _Atomic(unsigned char *) *slots;
static size_t nslots, per_thread, min_size, max_size, ops;
static int local_regions;

typedef struct {
    int id;
    uint64_t seed;
} worker_t;

/* A new block: its size in the first word, the pattern after it. */
static unsigned char *new_block(rng_t *r) {
    size_t size = rng_range(r, min_size, max_size);
    unsigned char *p = xmalloc(size);
    memcpy(p, &size, 8);
    fill(p + 8, size - 8, size);
    return p;
}

static void free_block(unsigned char *p) {
    size_t size;
    memcpy(&size, p, 8);
    if (size < min_size || size > max_size) die("larson: block header overwritten");
    check(p + 8, size - 8, size, "larson");
    free(p);
}

static void *worker(void *arg) {
    worker_t *w = arg;
    rng_t r;
    rng_seed(&r, w->seed);
    size_t base = local_regions ? (size_t)w->id * per_thread : 0;
    size_t span = local_regions ? per_thread : nslots;
    for (size_t i = 0; i < ops; i++) {
        size_t k = base + (size_t)rng_below(&r, span);
        unsigned char *old = atomic_exchange_explicit(&slots[k], new_block(&r), memory_order_acq_rel);
        free_block(old);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, rounds = 5, opt;
    uint64_t seed = 1;
    per_thread = 1000, min_size = 16, max_size = 512, ops = 200000;
    while ((opt = getopt(argc, argv, "t:c:s:S:n:r:lx:")) != -1) {
        switch (opt) {
        case 't': threads = (int)parse_size(optarg, usage); break;
        case 'c': per_thread = parse_size(optarg, usage); break;
        case 's': min_size = parse_size(optarg, usage); break;
        case 'S': max_size = parse_size(optarg, usage); break;
        case 'n': ops = parse_size(optarg, usage); break;
        case 'r': rounds = (int)parse_size(optarg, usage); break;
        case 'l': local_regions = 1; break;
        case 'x': seed = parse_size(optarg, usage); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (threads < 1 || per_thread < 1 || min_size < 16 || max_size < min_size || rounds < 1) {
        fputs("larson: need -t >= 1, -c >= 1, -s >= 16, -S >= -s, -r >= 1\n", stderr);
        return 2;
    }
    nslots = per_thread * (size_t)threads;
    slots = xmalloc(nslots * sizeof *slots);
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < nslots; i++) atomic_init(&slots[i], new_block(&r));

    worker_t *w = xmalloc(sizeof(worker_t) * (size_t)threads);
    double start = now_sec();
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < threads; i++)
            w[i] = (worker_t){.id = i, .seed = seed * 1000003 + (uint64_t)round * 1009 + (uint64_t)i};
        run_threads(threads, worker, w, sizeof *w);
    }
    double secs = now_sec() - start;
    for (size_t i = 0; i < nslots; i++) free_block(atomic_load(&slots[i]));
    free(w);
    free(slots);
    double total = (double)ops * threads * rounds;
    printf("larson: threads=%d rounds=%d replacements=%.0f secs=%.3f Mops/s=%.2f\n", threads,
           rounds, total, secs, total / secs / 1e6);
    return 0;
}
