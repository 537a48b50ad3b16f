/* Shared helpers of the C test programs: CHECK aborts the program with a
 * message naming the failed condition; smalloc_owned() asks the preloaded
 * library whether a pointer is one of its own. */
#ifndef SMALLOC_TEST_CHECK_H
#define SMALLOC_TEST_CHECK_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s (errno=%d)\n", __FILE__, \
                    __LINE__, #cond, errno);                                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

typedef bool (*owns_fn)(const void *);

/* The library's smalloc_owns, found in the global scope (LD_PRELOAD). */
static inline owns_fn smalloc_owns_fn(void) {
    static owns_fn f;
    if (!f) {
        f = (owns_fn)dlsym(RTLD_DEFAULT, "smalloc_owns");
        if (!f) {
            fprintf(stderr, "smalloc is not loaded (no smalloc_owns)\n");
            exit(2);
        }
    }
    return f;
}

static inline bool smalloc_owned(const void *p) { return smalloc_owns_fn()(p); }

/* Writes a pattern derived from tag and offset into p[0..n). */
static inline void fill(void *p, size_t n, unsigned tag) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(tag * 31u + i * 7u + (i >> 8));
}

/* Whether p[0..n) still holds fill(p, n, tag). */
static inline bool check_fill(const void *p, size_t n, unsigned tag) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(tag * 31u + i * 7u + (i >> 8))) return false;
    return true;
}

#endif
