/* The event counters of a library built with the `counters` feature, seen
 * in its report at exit: a thread allocates 1000 blocks of 6000 bytes (the
 * 6 KiB size class), frees 300 itself and hands 200 to the main thread,
 * which frees them (remote frees); 500 stay live. calloc, posix_memalign,
 * aligned_alloc and a moving realloc in the 20 KiB size class, all freed. */
#include "check.h"

#include <pthread.h>

enum { N = 1000, OWN = 300, HANDED = 200, SZ = 6000, BIG = 20000 };
static void *blocks[N];

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(SZ);
        CHECK(blocks[i] != NULL);
        fill(blocks[i], 64, i);
    }
    for (int i = 0; i < OWN; i++) free(blocks[i]);
    return NULL;
}

int main(void) {
    (void)smalloc_owns_fn();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    for (int i = OWN; i < OWN + HANDED; i++) {
        CHECK(check_fill(blocks[i], 64, i));
        free(blocks[i]);
    }
    for (int i = 0; i < 4; i++) {
        void *a = calloc(1, BIG), *b = NULL, *c = aligned_alloc(4096, BIG);
        CHECK(a && c && posix_memalign(&b, 4096, BIG) == 0);
        free(a), free(b), free(c);
    }
    /* 20000 bytes grown to 40000 moves to the 64 KiB size class. */
    void *r = realloc(malloc(BIG), 2 * BIG);
    CHECK(r != NULL);
    free(r);
    printf("counts ok\n");
    return 0;
}
