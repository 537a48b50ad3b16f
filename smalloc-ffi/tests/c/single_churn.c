/* One thread, a shadow model: blocks of random sizes (8 B to 256 KiB, most
 * small) allocated with malloc, calloc or realloc, filled from a tag and
 * checked whole before every free and across every realloc; phases that
 * free most blocks of a size range and then use that range lightly, so
 * that sweeps (run with SMALLOC_PURGE_DELAY_MS=1) find idle slots on lists
 * in use and give their pages back. No two live blocks may overlap. */
#include "check.h"

#include <time.h>
#include <unistd.h>

enum { SLOTS = 8192 };

struct block {
    unsigned char *p;
    size_t len;
    unsigned tag;
};

static struct block live[SLOTS];
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t random_size(void) {
    uint64_t r = next_rand();
    unsigned shift = 3 + (unsigned)(r % 100 < 90 ? r % 8 : r % 16);
    return (size_t)1 << shift | (size_t)(r >> 32) % ((size_t)1 << shift);
}

static unsigned char byte_of(unsigned tag, size_t i) { return (unsigned char)(tag * 31 + i * 7); }

static void fill_block(struct block *b) {
    for (size_t i = 0; i < b->len; i++) b->p[i] = byte_of(b->tag, i);
}

static void check_block(const struct block *b, size_t len) {
    for (size_t i = 0; i < len; i++) CHECK(b->p[i] == byte_of(b->tag, i));
}

static void release(struct block *b) {
    check_block(b, b->len);
    free(b->p);
    b->p = NULL;
}

static int by_address(const void *x, const void *y) {
    const struct block *a = x, *b = y;
    return a->p < b->p ? -1 : a->p > b->p;
}

static void check_disjoint(void) {
    static struct block sorted[SLOTS];
    int n = 0;
    for (int i = 0; i < SLOTS; i++)
        if (live[i].p) sorted[n++] = live[i];
    qsort(sorted, n, sizeof sorted[0], by_address);
    for (int i = 1; i < n; i++) CHECK(sorted[i - 1].p + sorted[i - 1].len <= sorted[i].p);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 40, ops = argc > 2 ? atoi(argv[2]) : 20000;
    unsigned tag = 1;
    for (int round = 0; round < rounds; round++) {
        /* A phase: most ops in one size range, the rest anywhere. */
        size_t lo = (size_t)8 << (round % 12), hi = lo * 4;
        for (int op = 0; op < ops; op++) {
            struct block *b = &live[next_rand() % SLOTS];
            uint64_t what = next_rand() % 10;
            if (b->p && what < 4) {
                release(b);
            } else if (b->p && what < 5) {
                size_t len = random_size();
                unsigned char *q = realloc(b->p, len);
                CHECK(q != NULL);
                b->p = q;
                check_block(b, len < b->len ? len : b->len);
                b->len = len;
                b->tag = tag++;
                fill_block(b);
            } else if (!b->p) {
                size_t len = what < 8 ? lo + next_rand() % (hi - lo) : random_size();
                if (what == 7) {
                    b->p = calloc(1, len);
                    CHECK(b->p != NULL);
                    for (size_t i = 0; i < len; i++) CHECK(b->p[i] == 0);
                } else {
                    b->p = malloc(len);
                    CHECK(b->p != NULL);
                }
                b->len = len;
                b->tag = tag++;
                fill_block(b);
            }
        }
        check_disjoint();
        /* The phase ends: nine blocks in ten of its range go; then a pause
         * long enough for a sweep or two. */
        for (int i = 0; i < SLOTS; i++)
            if (live[i].p && live[i].len >= lo && live[i].len < hi && i % 10)
                release(&live[i]);
        usleep(3000);
    }
    for (int i = 0; i < SLOTS; i++)
        if (live[i].p) release(&live[i]);
    printf("single churn ok\n");
    return 0;
}
