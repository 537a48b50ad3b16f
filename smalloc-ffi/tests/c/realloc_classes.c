/* realloc keeps contents across every size class, in place when the slot
 * still fits, and moves growing blocks by the "growers" policy. */
#include "check.h"

#include <malloc.h>

int main(void) {
    /* Grow byte by byte through the small classes, then by doubling up to
     * 64 MiB, checking the whole old content after each move. */
    size_t n = 1;
    char *p = malloc(n);
    fill(p, n, 1);
    while (n < ((size_t)64 << 20)) {
        size_t next = n < 4096 ? n + 1 : n * 2;
        char *q = realloc(p, next);
        CHECK(q != NULL && smalloc_owned(q));
        CHECK(check_fill(q, n, 1));
        fill(q, next, 1);
        p = q;
        n = next;
    }
    /* And back down, keeping the prefix. */
    while (n > 1) {
        n /= 3;
        char *q = realloc(p, n);
        CHECK(q != NULL && check_fill(q, n, 1));
        p = q;
    }
    free(p);

    /* In place while the slot fits, growing and shrinking. */
    p = malloc(100);
    CHECK(malloc_usable_size(p) == 128);
    CHECK(realloc(p, 128) == p && realloc(p, 101) == p && realloc(p, 1) == p);
    free(p);

    /* Out of a slot of 1 MiB or more when the block needs an eighth of it
     * or less: into a slot of the new size, keeping the prefix; the slot
     * given up serves the next request of its size. */
    p = malloc(1 << 20);
    size_t slot = malloc_usable_size(p); /* 1 MiB, or a freed larger slot */
    fill(p, slot, 5);
    CHECK(realloc(p, slot / 2) == p && realloc(p, slot / 8 + 1) == p);
    char *small = realloc(p, 1000);
    CHECK(small != NULL && small != p && malloc_usable_size(small) == 1024 &&
          check_fill(small, 1000, 5));
    char *again = malloc(slot);
    CHECK(again == p);
    free(again);
    free(small);
    p = malloc(16384);
    CHECK(realloc(p, 1) == p); /* below 1 MiB: in place */
    free(p);

    /* Growers: a moved block lands in the smallest of 64 B, 128 B, 4 KiB,
     * 16 KiB, 64 KiB, 256 KiB, 2 MiB that fits, else its own class. */
    struct { size_t from, to, usable; } g[] = {
        {8, 40, 64},          {8, 100, 128},          {100, 200, 4096},
        {100, 4096, 4096},    {5000, 9000, 16384},    {16384, 20000, 65536},
        {70000, 200000, 262144}, {300000, 600000, 2097152},
        {3 << 20, 5 << 20, 8 << 20},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        p = malloc(g[i].from);
        fill(p, g[i].from, (unsigned)i);
        char *q = realloc(p, g[i].to);
        CHECK(q != NULL && check_fill(q, g[i].from, (unsigned)i));
        if (malloc_usable_size(q) != g[i].usable) {
            fprintf(stderr, "realloc %zu -> %zu: usable %zu, want %zu\n", g[i].from, g[i].to,
                    malloc_usable_size(q), g[i].usable);
            return 1;
        }
        free(q);
    }

    /* Random walk of sizes over many live blocks. */
    enum { N = 512 };
    char *blk[N] = {0};
    size_t len[N] = {0};
    uint64_t r = 88172645463325252ull;
    for (int step = 0; step < 100000; step++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int i = (int)(r % N);
        size_t size = (size_t)((r >> 20) % ((r >> 60) < 2 ? 300000 : 2000));
        char *q = realloc(blk[i], size);
        if (size == 0) {
            /* realloc(p, 0) frees; realloc(NULL, 0) is malloc(0). */
            CHECK(blk[i] != NULL ? q == NULL : q != NULL);
        } else {
            CHECK(q != NULL);
            size_t keep = len[i] < size ? len[i] : size;
            CHECK(check_fill(q, keep, (unsigned)i));
            fill(q, size, (unsigned)i);
        }
        blk[i] = q;
        len[i] = size;
    }
    for (int i = 0; i < N; i++) {
        CHECK(check_fill(blk[i], len[i], (unsigned)i));
        free(blk[i]);
    }
    puts("realloc ok");
    return 0;
}
