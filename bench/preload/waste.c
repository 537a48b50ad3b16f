/* waste: internal waste of an allocator, measured on any program. An
 * LD_PRELOAD shim in front of the allocator under test: every malloc,
 * calloc, realloc, memalign, aligned_alloc and posix_memalign is passed on
 * (RTLD_NEXT) and its request size and the block's malloc_usable_size are
 * summed; at exit the sums go to stderr (or to the file WASTE_OUT).
 *
 *   cc -O2 -shared -fPIC -o waste.so bench/preload/waste.c -ldl
 *   LD_PRELOAD="$PWD/waste.so $PWD/target/release/libsmalloc.so" python3 app.py
 *
 * "usable/requested" is the average slot (or chunk) per requested byte,
 * weighted by bytes, for new blocks and for reallocated ones apart;
 * blocks of 0 bytes are left out.
 *
 * It also follows the live blocks' usable bytes, in all and per usable
 * size: "peak live" is their peak, "sum of per-size peaks" what an
 * allocator holds if every usable size (smalloc: every size class) keeps
 * the memory of its own peak, reusing none of it for other sizes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void *(*next_memalign)(size_t, size_t);
static size_t (*next_usable)(void *);

/* [0]: malloc, calloc and the aligned ones; [1]: realloc, whose block may
 * sit in a slot chosen for growth (smalloc's growers). */
static atomic_ullong calls[2], requested[2], usable[2];

/* Live usable bytes: in all, and per usable size (16-byte steps below 64
 * KiB, then four buckets to a doubling), each with its peak. */
#define SIZE_BUCKETS (4096 + 4 * 48)
static atomic_llong live, live_peak, size_live[SIZE_BUCKETS], size_peak[SIZE_BUCKETS];

static size_t bucket(size_t u) {
    if (u < 65536) return u / 16;
    size_t b = 63 - (size_t)__builtin_clzl(u);
    return 4096 + (b - 16) * 4 + ((u >> (b - 2)) & 3);
}

static void raise_to(atomic_llong *peak, long long v) {
    long long old = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > old && !atomic_compare_exchange_weak_explicit(peak, &old, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* A block of `u` usable bytes came (sign 1) or went (-1). */
static void follow(size_t u, long long sign) {
    long long d = sign * (long long)u;
    size_t b = bucket(u);
    raise_to(&live_peak, atomic_fetch_add_explicit(&live, d, memory_order_relaxed) + d);
    raise_to(&size_peak[b], atomic_fetch_add_explicit(&size_live[b], d, memory_order_relaxed) + d);
}

/* dlsym may call calloc before next_calloc is known: served from here. */
static char early[4096];
static size_t early_used;

static void init(void) {
    next_calloc = dlsym(RTLD_NEXT, "calloc");
    next_malloc = dlsym(RTLD_NEXT, "malloc");
    next_realloc = dlsym(RTLD_NEXT, "realloc");
    next_memalign = dlsym(RTLD_NEXT, "memalign");
    next_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
}

static void *count_as(int k, void *p, size_t size) {
    if (p && size) {
        atomic_fetch_add_explicit(&calls[k], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&requested[k], size, memory_order_relaxed);
        size_t u = next_usable(p);
        atomic_fetch_add_explicit(&usable[k], u, memory_order_relaxed);
        follow(u, 1);
    }
    return p;
}

static void *count(void *p, size_t size) { return count_as(0, p, size); }

static int is_early(void *p) { return (char *)p >= early && (char *)p < early + sizeof early; }

void *malloc(size_t n) {
    if (!next_malloc) init();
    return count(next_malloc(n), n);
}

void *calloc(size_t n, size_t size) {
    if (!next_calloc) {
        /* Inside dlsym: a zeroed piece of the static buffer. */
        size_t want = (n * size + 15) & ~(size_t)15;
        if (early_used + want > sizeof early) return NULL;
        void *p = early + early_used;
        early_used += want;
        return p;
    }
    return count(next_calloc(n, size), n * size);
}

void *realloc(void *p, size_t n) {
    if (!next_realloc) init();
    if (is_early(p)) {
        void *q = malloc(n);
        if (q) memcpy(q, p, n < sizeof early ? n : sizeof early);
        return q;
    }
    size_t before = p ? next_usable(p) : 0;
    void *q = next_realloc(p, n);
    if (q && p) follow(before, -1);
    if (q && !n) follow(next_usable(q), 1);
    return count_as(1, q, n);
}

void free(void *p) {
    static void (*next_free)(void *);
    if (!next_free) next_free = dlsym(RTLD_NEXT, "free");
    if (!next_usable) init();
    if (p && !is_early(p)) follow(next_usable(p), -1);
    if (!is_early(p)) next_free(p);
}

void *memalign(size_t align, size_t n) {
    if (!next_memalign) init();
    return count(next_memalign(align, n), n);
}

void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void **out, size_t align, size_t n) {
    void *p = memalign(align, n);
    if (!p) return 12; /* ENOMEM */
    *out = p;
    return 0;
}

size_t malloc_usable_size(void *p) {
    if (!next_usable) init();
    return is_early(p) ? 0 : next_usable(p);
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("WASTE_OUT");
    FILE *f = path ? fopen(path, "a") : stderr;
    if (!f) return;
    static const char *what[2] = {"malloc/calloc/aligned", "realloc"};
    for (int k = 0; k < 2; k++) {
        unsigned long long c = atomic_load(&calls[k]), r = atomic_load(&requested[k]), u = atomic_load(&usable[k]);
        fprintf(f, "waste %s: %llu blocks, %llu bytes requested, %llu usable, usable/requested %.3f\n", what[k], c,
                r, u, r ? (double)u / (double)r : 0.0);
    }
    long long sum = 0;
    for (size_t b = 0; b < SIZE_BUCKETS; b++) sum += atomic_load(&size_peak[b]);
    fprintf(f, "waste live usable bytes: peak live %.1f MiB, sum of per-size peaks %.1f MiB\n",
            (double)atomic_load(&live_peak) / 1048576.0, (double)sum / 1048576.0);
    if (f != stderr) fclose(f);
}
