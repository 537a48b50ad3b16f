/* glibc's introspection calls under LD_PRELOAD, answered by smalloc:
 * mallinfo2 and mallinfo after known allocations and frees, malloc_trim
 * lowering RSS after a free-heavy phase, malloc_info's XML on stdout and
 * malloc_stats's report on stderr. */
#include "check.h"

#include <limits.h>
#include <malloc.h>
#include <unistd.h>

/* Resident set size of this process in KiB. */
static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size, resident;
    CHECK(f && fscanf(f, "%ld %ld", &size, &resident) == 2);
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(void) {
    (void)smalloc_owns_fn();
    enum { N = 1000, M = 200 };
    static void *small[N], *blocks[M];
    const size_t big_size = (size_t)3 << 30, sz = 256 << 10;

    struct mallinfo2 a = mallinfo2();
    CHECK(a.arena == a.uordblks + a.fordblks);
    for (int i = 0; i < N; i++) {
        small[i] = malloc(100);
        fill(small[i], 100, i);
    }
    void *big = malloc(big_size);
    CHECK(big != NULL);
    struct mallinfo2 b = mallinfo2();
    CHECK(b.uordblks - a.uordblks == N * 112); /* 100 bytes: a 112-byte slot */
    CHECK(b.hblks == a.hblks + 1 && b.hblkhd - a.hblkhd >= big_size);
    CHECK(b.arena == b.uordblks + b.fordblks);
    for (int i = 0; i < N / 2; i++) {
        CHECK(check_fill(small[i], 100, i));
        free(small[i]);
    }
    struct mallinfo2 c = mallinfo2();
    CHECK(b.uordblks - c.uordblks == N / 2 * 112);
    CHECK(c.fordblks - b.fordblks == N / 2 * 112 && c.ordblks - b.ordblks == N / 2);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
    CHECK(m.hblkhd == INT_MAX); /* 3 GiB saturates the int */
    CHECK(m.uordblks == (int)c.uordblks && m.hblks == (int)c.hblks);
    free(big);
    CHECK(mallinfo2().hblks == a.hblks);

    /* A free-heavy phase: 50 MiB written, then freed; trim gives it back
     * (run with a purge delay of 0: nothing goes back unasked). */
    for (int i = 0; i < M; i++) {
        blocks[i] = malloc(sz);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 1, sz);
    }
    for (int i = 0; i < M; i++) free(blocks[i]);
    long freed = rss_kib();
    struct mallinfo2 d = mallinfo2();
    CHECK(d.keepcost >= M * (sz - 4096));
    CHECK(malloc_trim(0) == 1);
    long trimmed = rss_kib();
    CHECK(freed - trimmed >= (long)(M * (sz >> 10) * 8 / 10));
    CHECK(mallinfo2().keepcost == 0);
    /* rss_kib's stdio blocks were freed since: a trim resets their regions,
     * and a trim right after finds nothing left. */
    malloc_trim(0);
    CHECK(malloc_trim(0) == 0);
    /* The trimmed slots serve again. */
    for (int i = 0; i < M; i++) {
        blocks[i] = malloc(sz);
        fill(blocks[i], sz, i);
    }
    for (int i = 0; i < M; i++) {
        CHECK(check_fill(blocks[i], sz, i));
        free(blocks[i]);
    }

    errno = 0;
    CHECK(malloc_info(1, stdout) == -1 && errno == EINVAL);
    CHECK(malloc_info(0, stdout) == 0);
    fflush(stdout);
    malloc_stats();
    printf("introspect ok: rss %ld KiB after the frees, %ld KiB after malloc_trim\n", freed,
           trimmed);
    return 0;
}
