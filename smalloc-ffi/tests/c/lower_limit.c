/* A program that lowers its own address-space limit after the library made
 * its reservation (as Python's resource.setrlimit(RLIMIT_AS, ...) does):
 * blocks allocated before keep their contents (a block in a slot larger
 * than those new blocks get then shrinks into a mapping of its own), and
 * after the call a thread starts, a library loads, and small and big
 * blocks come. Prints "lower ok". */
#include <pthread.h>
#include <sys/resource.h>

#include "check.h"

#define N 2000

static void *thread_main(void *arg) {
    size_t n = (size_t)arg;
    char *p = malloc(n);
    CHECK(p != NULL);
    memset(p, 0x5a, n);
    free(p);
    return p;
}

int main(void) {
    static char *blocks[N];
    for (size_t i = 0; i < N; i++) {
        size_t n = 16 + (i * 7919) % 70000;
        blocks[i] = malloc(n);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], (int)(i & 0xff), n);
    }
    /* A 512 MiB slot, of which the first 40 MiB are written. */
    size_t huge = 300ul << 20, kept = 40ul << 20;
    char *h = malloc(huge);
    CHECK(h != NULL);
    memset(h, 0x3c, kept);
    struct rlimit lim = {1ul << 31, RLIM_INFINITY};
    CHECK(setrlimit(RLIMIT_AS, &lim) == 0);
    struct rlimit now;
    CHECK(getrlimit(RLIMIT_AS, &now) == 0 && now.rlim_cur == lim.rlim_cur);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_main, (void *)(size_t)(1 << 20)) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(dlopen("libm.so.6", RTLD_NOW) != NULL);
    h = realloc(h, kept);
    CHECK(h != NULL);
    for (size_t k = 0; k < kept; k += 4093)
        CHECK(h[k] == 0x3c);
    CHECK(h[kept - 1] == 0x3c);
    free(h);
    char *big = malloc(100 << 20);
    CHECK(big != NULL);
    memset(big, 1, 100 << 20);
    free(big);
    /* Beyond the limit: null with ENOMEM, as on glibc. */
    errno = 0;
    CHECK(malloc(3ul << 30) == NULL && errno == ENOMEM);
    for (size_t i = 0; i < N; i++) {
        size_t n = 16 + (i * 7919) % 70000;
        for (size_t k = 0; k < n; k += 61)
            CHECK(blocks[i][k] == (char)(i & 0xff));
        free(blocks[i]);
    }
    puts("lower ok");
    return 0;
}
