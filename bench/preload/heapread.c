/* heapread: what a heap's layout costs the program's own reads, not its
 * allocator's calls. Threads allocate blocks of random sizes (uniform in
 * [-s, -S]) and fill them; then every thread reads random blocks (the first
 * and last word of each, checked) and the read phase is timed: the same
 * reads of the same blocks, so only where the allocator put them differs
 * (how many pages and page-table pages they span, how they share lines).
 *
 * -P SPACING: no malloc; the program places the blocks itself, in
 * smalloc's size classes (16-byte steps up to 128 B, four to a doubling
 * above), each (thread mod 16, class) pair's blocks end to end in a region
 * of its own, regions SPACING bytes apart in one mapping: -P 4G is
 * smalloc's layout, -P 4M the same classes packed close. */
#include <sys/mman.h>

#include "common.h"

static const char *usage =
    "usage: heapread [-t threads] [-n blocks in all] [-s min size] [-S max size]\n"
    "                [-r reads per thread] [-P region spacing] [-x seed]\n"
    "  sizes take K/M/G suffixes; defaults -t 2 -n 32K -s 16 -S 512 -r 10M;\n"
    "  -P (at least 1M; -S at most 64K): place blocks in simulated regions, no malloc\n";

/* Regions of the placement simulation: 16 slabs of 64 classes. */
#define SIM_SLABS 16
#define SIM_CLASSES 64

static size_t nblocks, min_size, max_size, reads, spacing;
static unsigned char **blocks;
static size_t *sizes;
static unsigned char *sim_base;
static _Atomic size_t sim_used[SIM_SLABS * SIM_CLASSES];

typedef struct {
    int id, threads;
    uint64_t seed;
} worker_t;

/* smalloc's size class of `size`: its slot size and its index (1 up). */
static size_t class_of(size_t size, int *index) {
    if (size <= 128) {
        *index = (int)((size + 15) / 16);
        return (size + 15) / 16 * 16;
    }
    int b = 63 - __builtin_clzll(size - 1); /* 2^b < size <= 2^(b+1) */
    size_t quarter = (size_t)1 << (b - 2);
    size_t step = (size - ((size_t)1 << b) + quarter - 1) / quarter;
    *index = 8 + 4 * (b - 7) + (int)step;
    return ((size_t)1 << b) + step * quarter;
}

/* A block of `size` bytes for thread `id`: malloc's, or the simulation's. */
static unsigned char *place(int id, size_t size) {
    if (!spacing) return xmalloc(size);
    int k;
    size_t slot = class_of(size, &k);
    size_t region = (size_t)(id % SIM_SLABS) * SIM_CLASSES + (size_t)k;
    /* A first slot a few lines and pages in, by class, as smalloc's. */
    size_t first = ((size_t)k * 0x1040) & 0xffc0;
    size_t at = atomic_fetch_add_explicit(&sim_used[region], slot, memory_order_relaxed);
    if (first + at + slot > spacing) die("heapread: a simulated region is full (raise -P)");
    return sim_base + region * spacing + first + at;
}

static void *build(void *arg) {
    worker_t *w = arg;
    rng_t r;
    rng_seed(&r, w->seed);
    for (size_t i = (size_t)w->id; i < nblocks; i += (size_t)w->threads) {
        sizes[i] = rng_range(&r, min_size, max_size);
        blocks[i] = place(w->id, sizes[i]);
        fill(blocks[i], sizes[i], i);
    }
    return NULL;
}

static void *read_blocks(void *arg) {
    worker_t *w = arg;
    rng_t r;
    rng_seed(&r, w->seed ^ 0x5eed);
    uint64_t bad = 0;
    for (size_t n = 0; n < reads; n++) {
        size_t i = (size_t)rng_below(&r, nblocks);
        const unsigned char *b = blocks[i];
        size_t size = sizes[i];
        uint64_t first, last;
        memcpy(&first, b, 8);
        memcpy(&last, b + size - 8, 8);
        bad |= (first ^ pattern_word(i, 0)) | (last ^ pattern_word(i, size - 8));
    }
    if (bad) die("heapread: a block was overwritten");
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, opt;
    uint64_t seed = 1;
    nblocks = 32 << 10, min_size = 16, max_size = 512, reads = 10000000, spacing = 0;
    while ((opt = getopt(argc, argv, "t:n:s:S:r:P:x:")) != -1) {
        switch (opt) {
        case 't': threads = (int)parse_size(optarg, usage); break;
        case 'n': nblocks = parse_size(optarg, usage); break;
        case 's': min_size = parse_size(optarg, usage); break;
        case 'S': max_size = parse_size(optarg, usage); break;
        case 'r': reads = parse_size(optarg, usage); break;
        case 'P': spacing = parse_size(optarg, usage); break;
        case 'x': seed = parse_size(optarg, usage); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (threads < 1 || nblocks < 1 || min_size < 16 || max_size < min_size ||
        (spacing && (spacing < (1 << 20) || max_size > (64 << 10)))) {
        fputs("heapread: need -t >= 1, -n >= 1, -s >= 16, -S >= -s; -P at least 1M with -S at most 64K\n",
              stderr);
        return 2;
    }
    if (spacing) {
        size_t len = spacing * SIM_SLABS * SIM_CLASSES;
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (m == MAP_FAILED) die("heapread: mmap of the simulated regions failed");
        sim_base = m;
    }
    blocks = xmalloc(nblocks * sizeof *blocks);
    sizes = xmalloc(nblocks * sizeof *sizes);
    worker_t *w = xmalloc(sizeof(worker_t) * (size_t)threads);
    for (int i = 0; i < threads; i++) w[i] = (worker_t){i, threads, seed + (uint64_t)i};
    run_threads(threads, build, w, sizeof *w);
    double start = now_sec();
    run_threads(threads, read_blocks, w, sizeof *w);
    double secs = now_sec() - start;
    if (!spacing)
        for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
    free(w);
    free(blocks);
    free(sizes);
    printf("heapread: threads=%d blocks=%zu reads=%zu secs=%.3f ns/read=%.2f\n", threads, nblocks,
           reads * (size_t)threads, secs, secs * 1e9 / (double)reads);
    return 0;
}
