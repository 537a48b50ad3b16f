/* Every edge case of the C allocation API, with errno, under LD_PRELOAD. */
#include "check.h"

#include <malloc.h>
#include <unistd.h>

#define GiB ((size_t)1 << 30)

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static void test_malloc(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a != NULL && b != NULL && a != b);
    CHECK(smalloc_owned(a) && smalloc_owned(b));
    CHECK(malloc_usable_size(a) >= 16);
    free(a);
    free(b);
    for (size_t n = 1; n <= 70000; n = n * 3 / 2 + 1) {
        void *p = malloc(n);
        CHECK(p != NULL && smalloc_owned(p));
        CHECK((uintptr_t)p % 16 == 0);
        size_t u = malloc_usable_size(p);
        CHECK(u >= n && u < 2 * n + 16);
        fill(p, u, (unsigned)n);
        CHECK(check_fill(p, u, (unsigned)n));
        free(p);
    }
    free(NULL);
    CHECK(malloc_usable_size(NULL) == 0);
    errno = 0;
    CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc(SIZE_MAX - 4096) == NULL && errno == ENOMEM);
}

static void test_calloc(void) {
    errno = 0;
    CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(3, SIZE_MAX / 2) == NULL && errno == ENOMEM);
    void *z1 = calloc(0, 5), *z2 = calloc(5, 0);
    CHECK(z1 && z2 && z1 != z2 && smalloc_owned(z1));
    free(z1);
    free(z2);
    /* A reused slot is cleared: dirty one, free it, calloc the same class. */
    for (int round = 0; round < 50; round++) {
        unsigned char *d = malloc(200);
        memset(d, 0xab, 256 > malloc_usable_size(d) ? malloc_usable_size(d) : 256);
        free(d);
        unsigned char *c = calloc(10, 20);
        CHECK(c != NULL);
        for (int i = 0; i < 200; i++) CHECK(c[i] == 0);
        memset(c, 0xcd, 200);
        free(c);
    }
}

static void test_realloc(void) {
    errno = 0;
    char *p = realloc(NULL, 100);
    CHECK(p != NULL && smalloc_owned(p) && errno == 0);
    fill(p, 100, 1);
    /* realloc(p, 0) frees and returns NULL, errno untouched (glibc). */
    CHECK(realloc(p, 0) == NULL && errno == 0);
    /* Growing keeps the contents. */
    p = malloc(24);
    fill(p, 24, 2);
    p = realloc(p, 100000);
    CHECK(p != NULL && check_fill(p, 24, 2));
    /* Failure leaves the block untouched. */
    errno = 0;
    CHECK(realloc(p, SIZE_MAX - 10) == NULL && errno == ENOMEM);
    CHECK(check_fill(p, 24, 2));
    free(p);
    /* reallocarray overflow: NULL + ENOMEM, block untouched. */
    char *q = malloc(32);
    fill(q, 32, 3);
    errno = 0;
    CHECK(reallocarray(q, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    CHECK(check_fill(q, 32, 3));
    q = reallocarray(q, 10, 100);
    CHECK(q != NULL && malloc_usable_size(q) >= 1000 && check_fill(q, 32, 3));
    free(q);
    /* reallocarray(NULL, 0, n) is malloc(0): a unique pointer. */
    void *z = reallocarray(NULL, 0, 8);
    CHECK(z != NULL && smalloc_owned(z));
    free(z);
}

static void check_aligned_block(void *p, size_t align, size_t size) {
    CHECK(p != NULL);
    CHECK((uintptr_t)p % align == 0);
    CHECK(malloc_usable_size(p) >= size);
    CHECK(smalloc_owned(p));
}

static void test_aligned(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bad[] = {0, 3, 12, 24, 48, 100, 4097, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        CHECK(aligned_alloc(bad[i], 64) == NULL && errno == EINVAL);
        errno = 0;
        CHECK(memalign(bad[i], 64) == NULL && errno == EINVAL);
        void *out = (void *)0x1234;
        errno = 777;
        CHECK(posix_memalign(&out, bad[i], 64) == EINVAL);
        CHECK(errno == 777 && out == (void *)0x1234);
    }
    /* posix_memalign also needs a multiple of sizeof(void *). */
    for (size_t a = 1; a < sizeof(void *); a <<= 1) {
        void *out = (void *)0x1234;
        errno = 777;
        CHECK(posix_memalign(&out, a, 64) == EINVAL && errno == 777 && out == (void *)0x1234);
    }
    void *out = (void *)0x1234;
    errno = 777;
    CHECK(posix_memalign(&out, 64, SIZE_MAX - 100) == ENOMEM);
    CHECK(errno == 777 && out == (void *)0x1234);
    errno = 0;
    CHECK(aligned_alloc(64, SIZE_MAX - 100) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(memalign(64, SIZE_MAX - 100) == NULL && errno == ENOMEM);
    CHECK(posix_memalign(&out, 8, 0) == 0 && out != NULL);
    free(out);

    void *v = valloc(10);
    check_aligned_block(v, page, 10);
    free(v);
    v = valloc(0);
    CHECK(v != NULL && (uintptr_t)v % page == 0);
    free(v);
    v = pvalloc(0);
    check_aligned_block(v, page, page);
    free(v);
    v = pvalloc(page + 1);
    check_aligned_block(v, page, 2 * page);
    free(v);
    errno = 0;
    CHECK(pvalloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(valloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
}

/* Under an emulator (qemu-user) the resident set is the emulator's,
 * translated code included: its bounds are not checked there. */
static int resident_set_is_ours(void) { return getenv("SMALLOC_TEST_EMULATED") == NULL; }

static long resident_kib(void) {
    if (!resident_set_is_ours()) return 0;
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    CHECK(f != NULL && fscanf(f, "%ld %ld", &size, &res) == 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_calloc_rss(void) {
    long before = resident_kib();
    unsigned char *p = calloc(1, GiB);
    CHECK(p != NULL && smalloc_owned(p));
    long after = resident_kib();
    CHECK(after - before < 16 * 1024);
    CHECK(p[0] == 0 && p[GiB / 2] == 0 && p[GiB - 1] == 0);
    /* Dirty it, free, calloc again: a reused slot is cleared, and without
     * making it resident. */
    memset(p, 0x5a, 64 << 20);
    p[GiB - 1] = 0x5a;
    free(p);
    before = resident_kib();
    p = calloc(GiB, 1);
    /* At most one page: a big allocation's header (layout mapped on
     * demand, whose largest slot is 32 MiB). */
    CHECK(p != NULL && resident_kib() <= before + sysconf(_SC_PAGESIZE) / 1024);
    for (size_t i = 0; i < (64 << 20); i += 4093) CHECK(p[i] == 0);
    CHECK(p[GiB - 1] == 0);
    free(p);
    /* The same for a size that is not a whole number of pages. */
    p = malloc(3 << 20);
    memset(p, 0x77, 3 << 20);
    free(p);
    p = calloc(1, (3 << 20) - 100);
    for (size_t i = 0; i < (3 << 20) - 100; i++) CHECK(p[i] == 0);
    free(p);
    /* A big (above 2 GiB) calloc is a fresh mapping: zero and not resident. */
    before = resident_kib();
    p = calloc(3, GiB);
    CHECK(p != NULL && smalloc_owned(p));
    CHECK(resident_kib() - before < 16 * 1024);
    CHECK(p[0] == 0 && p[3 * GiB - 1] == 0);
    free(p);
}

static void test_big(void) {
    char *p = malloc(3 * GiB);
    CHECK(p != NULL && smalloc_owned(p) && (uintptr_t)p % 16 == 0);
    size_t u = malloc_usable_size(p);
    CHECK(u >= 3 * GiB && u < 3 * GiB + 2 * 4096 + 64);
    fill(p, 4096, 7);
    fill(p + 3 * GiB - 4096, 4096, 8);
    /* Grow: contents kept (mremap may move it). */
    char *q = realloc(p, 5 * GiB);
    CHECK(q != NULL && smalloc_owned(q) && malloc_usable_size(q) >= 5 * GiB);
    CHECK(check_fill(q, 4096, 7) && check_fill(q + 3 * GiB - 4096, 4096, 8));
    q[5 * GiB - 1] = 1;
    /* Shrink below the largest slot: stays a mapping, prefix kept. */
    char *r = realloc(q, 10000);
    CHECK(r != NULL && smalloc_owned(r) && malloc_usable_size(r) >= 10000);
    CHECK(check_fill(r, 4096, 7));
    free(r);
    /* Over-aligned big blocks, and alignment beyond the largest slot. */
    size_t aligns[] = {4096, (size_t)1 << 21, (size_t)1 << 32};
    size_t sizes[] = {100, 3 * GiB};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            if (aligns[i] < ((size_t)1 << 31) && sizes[j] < GiB) continue;
            char *a = aligned_alloc(aligns[i], sizes[j]);
            check_aligned_block(a, aligns[i], sizes[j]);
            a[0] = 1;
            a[sizes[j] - 1] = 2;
            char *b = realloc(a, sizes[j] + GiB);
            CHECK(b != NULL && b[0] == 1 && b[sizes[j] - 1] == 2);
            free(b);
        }
    /* Several live big blocks at once, freed in another order. */
    void *bs[8];
    for (int i = 0; i < 8; i++) {
        bs[i] = malloc(3 * GiB + (size_t)i * 4096);
        CHECK(bs[i] != NULL && smalloc_owned(bs[i]));
    }
    for (int i = 0; i < 8; i++) free(bs[(i * 5) % 8]);
}

static void test_libc_aliases(void) {
    char *p = __libc_malloc(100);
    CHECK(p && smalloc_owned(p));
    fill(p, 100, 9);
    p = realloc(p, 5000);
    CHECK(p && check_fill(p, 100, 9));
    free(p);
    p = malloc(50);
    p = __libc_realloc(p, 70000);
    CHECK(p && smalloc_owned(p));
    __libc_free(p);
    unsigned char *c = __libc_calloc(100, 3);
    CHECK(c && c[299] == 0);
    free(c);
    void *m = __libc_memalign(4096, 10);
    CHECK(m && (uintptr_t)m % 4096 == 0);
    __libc_free(m);
    m = __libc_valloc(10);
    CHECK(m && (uintptr_t)m % 4096 == 0);
    free(m);
    m = __libc_pvalloc(10);
    CHECK(m && (uintptr_t)m % 4096 == 0 && malloc_usable_size(m) >= 4096);
    free(m);
    /* C23's free_sized and free_aligned_sized: older C libraries lack them,
     * so look them up (they must come from smalloc). */
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*fas)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    CHECK(fs != NULL && fas != NULL);
    for (int i = 0; i < 1000; i++) {
        m = malloc(100);
        fs(m, 100);
        m = aligned_alloc(256, 512);
        CHECK((uintptr_t)m % 256 == 0);
        fas(m, 256, 512);
    }
}

/* Memory made by glibc's own allocator (as memory allocated before the
 * preload took effect would be) must be handed back to it. */
static void test_foreign(void) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL);
    void *(*libc_malloc)(size_t) = (void *(*)(size_t))dlsym(libc, "malloc");
    CHECK(libc_malloc != NULL && libc_malloc != malloc);
    for (int i = 0; i < 100; i++) {
        char *f = libc_malloc(100 + (size_t)i * 37);
        CHECK(f != NULL && !smalloc_owned(f));
        CHECK(malloc_usable_size(f) >= 100 + (size_t)i * 37);
        fill(f, 100, (unsigned)i);
        f = realloc(f, 1000 + (size_t)i * 100);
        CHECK(f != NULL && check_fill(f, 100, (unsigned)i));
        if (i % 3 == 0)
            CHECK(realloc(f, 0) == NULL);
        else
            free(f);
    }
    dlclose(libc);
}

int main(void) {
    test_malloc();
    test_calloc();
    test_realloc();
    test_aligned();
    test_calloc_rss();
    test_big();
    test_libc_aliases();
    test_foreign();
    puts("edge cases ok");
    return 0;
}
