/* realloc keeps contents across every size class, in place when the slot
 * still fits, and moves growing blocks by the "growers" policy. */
#include "check.h"

#include <malloc.h>

/* The number of mappings in /proc/self/maps that start inside smalloc's
 * reservation. */
static int reservation_vmas(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long start = strtoul(line, NULL, 16);
        if (smalloc_owned((void *)start)) n++;
    }
    fclose(f);
    return n;
}

/* fill() and check_fill() of the first and the last 256 bytes only. */
static void fill_ends(char *p, size_t n, unsigned tag) {
    if (n <= 512) {
        fill(p, n, tag);
        return;
    }
    fill(p, 256, tag);
    fill(p + n - 256, 256, tag + 1);
}

static bool check_ends(const char *p, size_t n, unsigned tag) {
    if (n <= 512) return check_fill(p, n, tag);
    return check_fill(p, 256, tag) && check_fill(p + n - 256, 256, tag + 1);
}

/* 3000 blocks doubled from 16 B up to 4 MiB, 16 live at once, each
 * checked before it is freed. */
static void grow_cycles(void) {
    enum { L = 16 };
    char *keep[L] = {0};
    size_t klen[L] = {0};
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int cycle = 0; cycle < 3000; cycle++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t top = (size_t)16 << (x % 19); /* 16 B .. 4 MiB */
        size_t n = 16;
        char *b = malloc(n);
        fill_ends(b, n, (unsigned)cycle);
        while (n < top) {
            char *c = realloc(b, 2 * n);
            CHECK(c != NULL && check_ends(c, n, (unsigned)cycle));
            b = c;
            n *= 2;
            fill_ends(b, n, (unsigned)cycle);
        }
        int k = cycle % L;
        if (keep[k]) {
            CHECK(check_ends(keep[k], klen[k], (unsigned)(cycle - L)));
            free(keep[k]);
        }
        keep[k] = b;
        klen[k] = n;
    }
    for (int k = 0; k < L; k++) free(keep[k]);
}

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
    CHECK(malloc_usable_size(p) == 112); /* 96, 112, 128: 16 bytes apart */
    CHECK(realloc(p, 112) == p && realloc(p, 101) == p && realloc(p, 1) == p);
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
     * 16 KiB, 64 KiB, 256 KiB, 2 MiB that fits, else its own class (none of
     * these doubles its slot exactly, see below). */
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
        /* From 64 KiB on, a freed slot of up to four times the size may
         * serve the request (found before new memory is touched). */
        size_t got = malloc_usable_size(q);
        if (got != g[i].usable &&
            !(g[i].usable >= 65536 && got > g[i].usable && got <= 4 * g[i].usable)) {
            fprintf(stderr, "realloc %zu -> %zu: usable %zu, want %zu\n", g[i].from, g[i].to,
                    malloc_usable_size(q), g[i].usable);
            return 1;
        }
        free(q);
    }

    /* A block that doubles past 64 KiB (C knows only the old slot: a
     * request of exactly twice it) goes straight to a 2 MiB slot, not to
     * 256 KiB, and grows there in place: the next powers of two stay (what
     * a doubling array asks for), other sizes of an eighth of the slot or
     * less still leave it. (A large request may get a freed slot of up to
     * four times its size: the checks of large slots allow that, and then
     * the jump comes from there.) */
    {
        size_t n = 16384;
        p = malloc(n);
        fill(p, n, 77);
        int late_moves = 0;
        while (malloc_usable_size(p) < (2u << 20)) {
            char *q = realloc(p, 2 * n);
            CHECK(q != NULL && check_fill(q, n, 77));
            if (q != p && 2 * n > 65536) late_moves++;
            p = q;
            n *= 2;
            fill(p, n, 77);
            CHECK(n <= 512 * 1024);
        }
        CHECK(late_moves == 1 && malloc_usable_size(p) <= (8u << 20));
        size_t jumped = n;
        for (; n < (2u << 20); n *= 2) {
            CHECK(realloc(p, 2 * n) == p && check_fill(p, jumped, 77));
        }
        char *e = realloc(p, 200000);
        CHECK(e != NULL && e != p && check_fill(e, 131072, 77));
        /* 200,000 bytes: a 224 KiB slot (or a borrowed larger one). */
        CHECK(malloc_usable_size(e) >= 229376 && malloc_usable_size(e) <= 4 * 229376);
        free(e);
    }
    /* Growth that is not an exact doubling of the slot, or does not pass
     * 64 KiB, keeps the ladder. */
    p = malloc(30000);
    fill(p, 30000, 79);
    char *d = realloc(p, 70000);
    CHECK(d != NULL && check_fill(d, 30000, 79));
    CHECK(malloc_usable_size(d) >= 262144 && malloc_usable_size(d) <= 1048576);
    free(d);
    p = malloc(30000);
    fill(p, 30000, 80);
    d = realloc(p, 65536);
    CHECK(d != NULL && check_fill(d, 30000, 80));
    CHECK(malloc_usable_size(d) >= 65536 && malloc_usable_size(d) <= 262144);
    free(d);

    /* Thousands of blocks doubled up to 4 MiB, 16 live at once, keep
     * smalloc's reservation in as many mappings as before: realloc copies,
     * it does not move pages (which would split the reservation into more
     * VMAs, and the kernel limits them to vm.max_map_count). The first
     * round commits the regions it uses (a mapping each); the second, the
     * same sequence again, must add none. */
    grow_cycles();
    {
        int before = reservation_vmas();
        CHECK(before >= 1);
        grow_cycles();
        int after = reservation_vmas();
        if (after != before) {
            fprintf(stderr, "mappings in the reservation: %d before, %d after\n", before, after);
            return 1;
        }
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
