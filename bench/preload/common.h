/* Shared by the preload stress programs: a seeded random generator, clock,
 * fill/check patterns that touch every page of a block, and small helpers.
 * The programs call the system malloc/free only, so an LD_PRELOADed
 * allocator replaces it. */
#ifndef PRELOAD_COMMON_H
#define PRELOAD_COMMON_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* SplitMix64: a tiny, fast, seedable generator. */
typedef struct {
    uint64_t s;
} rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed) { r->s = seed * 0x9e3779b97f4a7c15ull + 1; }

static inline uint64_t rng_next(rng_t *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static inline uint64_t rng_below(rng_t *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi) {
    return lo + (size_t)rng_below(r, (uint64_t)(hi - lo) + 1);
}

/* Log-uniform in [lo, hi]: every power-of-two band equally likely. */
static inline size_t rng_log_size(rng_t *r, size_t lo, size_t hi) {
    if (lo < 1) lo = 1;
    int lo_bit = 63 - __builtin_clzll(lo), hi_bit = 63 - __builtin_clzll(hi);
    int bit = lo_bit + (int)rng_below(r, (uint64_t)(hi_bit - lo_bit) + 1);
    size_t band_lo = (size_t)1 << bit, band_hi = band_lo * 2 - 1;
    if (band_lo < lo) band_lo = lo;
    if (band_hi > hi) band_hi = hi;
    return rng_range(r, band_lo, band_hi);
}

static inline double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void die(const char *what) {
    fprintf(stderr, "%s\n", what);
    exit(1);
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) die("malloc failed");
    return p;
}

/* The word written at offset `off` of a block tagged `tag`. */
static inline uint64_t pattern_word(uint64_t tag, size_t off) {
    return (tag ^ (off * 0x9e3779b97f4a7c15ull)) | 1;
}

/* Writes the pattern into a block of `size` bytes: the first and last
 * word, and one word every 4 KiB in between (none overlapping the last),
 * so every page of the block is touched (and counts in the resident set)
 * and overlapping blocks are caught. Blocks under 8 bytes get one byte. */
static inline void fill(void *p, size_t size, uint64_t tag) {
    unsigned char *b = p;
    if (size < 8) {
        b[0] = (unsigned char)tag;
        return;
    }
    for (size_t off = 0; off + 16 <= size; off += 4096) {
        uint64_t w = pattern_word(tag, off);
        memcpy(b + off, &w, 8);
    }
    uint64_t last = pattern_word(tag, size - 8);
    memcpy(b + size - 8, &last, 8);
}

/* Verifies what `fill` wrote; exits with a message on a mismatch. */
static inline void check(const void *p, size_t size, uint64_t tag, const char *who) {
    const unsigned char *b = p;
    int bad = 0;
    if (size < 8) {
        bad = b[0] != (unsigned char)tag;
    } else {
        uint64_t w;
        for (size_t off = 0; off + 16 <= size && !bad; off += 4096) {
            memcpy(&w, b + off, 8);
            bad = w != pattern_word(tag, off);
        }
        memcpy(&w, b + size - 8, 8);
        bad |= w != pattern_word(tag, size - 8);
    }
    if (bad) {
        fprintf(stderr, "%s: block %p (%zu bytes) was overwritten\n", who, p, size);
        exit(1);
    }
}

/* Parses a non-negative number with an optional K/M/G suffix (powers of
 * 1024) or exits with usage. */
static inline size_t parse_size(const char *s, const char *usage) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) goto bad;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end != '\0') goto bad;
    return (size_t)v;
bad:
    fprintf(stderr, "bad number '%s'\n%s", s, usage);
    exit(2);
}

/* Starts `n` threads running `fn(&args[i])`, joins them all. */
static inline void run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size) {
    pthread_t *t = xmalloc(sizeof(pthread_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, fn, (char *)args + (size_t)i * arg_size) != 0)
            die("pthread_create failed");
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
}

/* The options of the false-sharing programs (cache-thrash, cache-scratch):
 * -t threads, -n objects in total (stored as objects per thread), -w writes
 * per byte, -s object size. Returns 0, or 2 (the exit status) after printing
 * why. */
static inline int parse_cache_opts(int argc, char **argv, const char *name, const char *usage,
                                   int *threads, size_t *per_thread, size_t *writes,
                                   size_t *size) {
    int opt;
    size_t total = 1000000;
    *threads = 2, *writes = 100, *size = 8;
    while ((opt = getopt(argc, argv, "t:n:w:s:")) != -1) {
        switch (opt) {
        case 't': *threads = (int)parse_size(optarg, usage); break;
        case 'n': total = parse_size(optarg, usage); break;
        case 'w': *writes = parse_size(optarg, usage); break;
        case 's': *size = parse_size(optarg, usage); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (*threads < 1 || *size < 1) {
        fprintf(stderr, "%s: need -t >= 1, -s >= 1\n", name);
        return 2;
    }
    *per_thread = total / (size_t)*threads;
    return 0;
}

#endif
