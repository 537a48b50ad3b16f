/* xmalloc-test: producers allocate, consumers free (after the test of Lever
 * & Boreham, "malloc() Performance in a Multithreaded Linux Environment",
 * USENIX 2000). Threads come in pairs joined by a lock-free single-producer
 * single-consumer ring: the producer allocates blocks of random size, fills
 * them and passes them on in batches (as the original passed lists of
 * blocks); the consumer checks and frees them. Every free is of a block
 * another thread allocated. */
#include "common.h"

static const char *usage =
    "usage: xmalloc-test [-t threads (even, >= 2)] [-n blocks per producer]\n"
    "                    [-s min size] [-S max size] [-q ring capacity] [-b batch] [-x seed]\n"
    "  -b: the producer publishes its blocks this many at a time\n"
    "  sizes take K/M/G suffixes; defaults -t 2 -n 1000000 -s 16 -S 1K -q 4096 -b 64\n";

typedef struct {
    _Alignas(64) _Atomic size_t head; /* next slot the consumer reads */
    _Alignas(64) _Atomic size_t tail; /* next slot the producer writes */
    _Alignas(64) unsigned char **buf;
    size_t mask;
} ring_t;

typedef struct {
    ring_t *ring;
    int producer;
    uint64_t seed;
    size_t max_in_flight; /* producer: most blocks allocated and not yet taken by the consumer */
} role_t;

static size_t blocks, min_size, max_size, batch;

/* Spins briefly, then gives the core away (threads may outnumber cores). */
static void wait_a_little(void) {
    for (int i = 0; i < 64; i++) __builtin_ia32_pause();
    sched_yield();
}

static void *producer(role_t *me) {
    ring_t *q = me->ring;
    rng_t r;
    rng_seed(&r, me->seed);
    size_t cap = q->mask + 1, t = 0;
    for (size_t i = 0; i < blocks; i++) {
        size_t size = rng_range(&r, min_size, max_size);
        unsigned char *p = xmalloc(size);
        memcpy(p, &size, 8);
        fill(p + 8, size - 8, size ^ i);
        size_t h;
        while (t - (h = atomic_load_explicit(&q->head, memory_order_acquire)) == cap) wait_a_little();
        q->buf[t & q->mask] = p;
        t++;
        if (t - h > me->max_in_flight) me->max_in_flight = t - h;
        if (t % batch == 0 || i + 1 == blocks) atomic_store_explicit(&q->tail, t, memory_order_release);
    }
    return NULL;
}

static void *consumer(role_t *me) {
    ring_t *q = me->ring;
    for (size_t i = 0; i < blocks; i++) {
        size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
        while (atomic_load_explicit(&q->tail, memory_order_acquire) == h) wait_a_little();
        unsigned char *p = q->buf[h & q->mask];
        atomic_store_explicit(&q->head, h + 1, memory_order_release);
        size_t size;
        memcpy(&size, p, 8);
        if (size < min_size || size > max_size) die("xmalloc-test: block header overwritten");
        check(p + 8, size - 8, size ^ i, "xmalloc-test");
        free(p);
    }
    return NULL;
}

static void *thread_main(void *arg) {
    role_t *me = arg;
    return me->producer ? producer(me) : consumer(me);
}

int main(int argc, char **argv) {
    int threads = 2, opt;
    size_t cap = 4096;
    uint64_t seed = 1;
    batch = 64;
    blocks = 1000000, min_size = 16, max_size = 1024;
    while ((opt = getopt(argc, argv, "t:n:s:S:q:b:x:")) != -1) {
        switch (opt) {
        case 't': threads = (int)parse_size(optarg, usage); break;
        case 'n': blocks = parse_size(optarg, usage); break;
        case 's': min_size = parse_size(optarg, usage); break;
        case 'S': max_size = parse_size(optarg, usage); break;
        case 'q': cap = parse_size(optarg, usage); break;
        case 'b': batch = parse_size(optarg, usage); break;
        case 'x': seed = parse_size(optarg, usage); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (threads < 2 || threads % 2 || min_size < 16 || max_size < min_size || batch < 1 ||
        cap < batch || (cap & (cap - 1))) {
        fputs("xmalloc-test: need even -t >= 2, -s >= 16, -S >= -s, -q a power of two >= -b >= 1\n",
              stderr);
        return 2;
    }
    int pairs = threads / 2;
    ring_t *rings = aligned_alloc(64, sizeof(ring_t) * (size_t)pairs);
    if (!rings) die("aligned_alloc failed");
    role_t *roles = xmalloc(sizeof(role_t) * (size_t)threads);
    for (int i = 0; i < pairs; i++) {
        atomic_init(&rings[i].head, 0);
        atomic_init(&rings[i].tail, 0);
        rings[i].buf = xmalloc(cap * sizeof(unsigned char *));
        rings[i].mask = cap - 1;
        roles[2 * i] = (role_t){.ring = &rings[i], .producer = 1, .seed = seed * 7919 + (uint64_t)i};
        roles[2 * i + 1] = (role_t){.ring = &rings[i], .producer = 0};
    }
    double start = now_sec();
    run_threads(threads, thread_main, roles, sizeof *roles);
    double secs = now_sec() - start;
    for (int i = 0; i < pairs; i++) free(rings[i].buf);
    free(rings);
    /* How far the producers ran ahead: the live set (and so the peak RSS)
     * grows with it, up to the ring capacity, whatever the allocator. */
    size_t in_flight = 0;
    for (int i = 0; i < pairs; i++) in_flight += roles[2 * i].max_in_flight;
    double total = (double)blocks * pairs;
    printf("xmalloc-test: threads=%d blocks=%.0f secs=%.3f Mblocks/s=%.2f max_in_flight=%zu\n",
           threads, total, secs, total / secs / 1e6, in_flight);
    return 0;
}
