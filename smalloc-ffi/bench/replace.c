/* The C side of the replace measurement (see overhead.sh): larson's step.
 * The main thread allocates N blocks of 16 B to about 1 KiB; a second
 * thread, which allocated a block of its own first (so it owns a slab),
 * then frees each block and allocates one of the same size in its place,
 * in `replace_all`, the function the measurement counts. Each free is of
 * another thread's block and each allocation finds the thread's own
 * supply of the class empty: the cold paths a server's workers take when
 * they free what other threads allocated and allocate as much.
 *
 * `replace N guest`: sixteen more threads allocate first and wait, so that
 * with the main thread every slab has an owner and the replacing thread is
 * a guest (smalloc's threads beyond the slabs). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define OWNERS 16

static void **blocks;
static long n;
static pthread_barrier_t started, done;

static size_t size_of(long i) { return 16 + (size_t)(i * 37) % 1000; }

__attribute__((noinline)) void replace_all(void) {
    for (long i = 0; i < n; i++) {
        free(blocks[i]);
        blocks[i] = malloc(size_of(i));
        *(volatile char *)blocks[i] = 1;
    }
}

static void *owner(void *arg) {
    (void)arg;
    void *volatile own = malloc(16);
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&done);
    free(own);
    return NULL;
}

static void *worker(void *arg) {
    (void)arg;
    void *volatile own = malloc(16);
    free(own);
    replace_all();
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 1000000;
    int owners = argc > 2 && strcmp(argv[2], "guest") == 0 ? OWNERS : 0;
    blocks = malloc(n * sizeof *blocks);
    if (!blocks) return 1;
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc(size_of(i));
        if (!blocks[i]) return 1;
        *(volatile char *)blocks[i] = 1;
    }
    pthread_t o[OWNERS], t;
    if (owners) {
        pthread_barrier_init(&started, NULL, owners + 1);
        pthread_barrier_init(&done, NULL, owners + 1);
        for (int i = 0; i < owners; i++)
            if (pthread_create(&o[i], NULL, owner, NULL)) return 1;
        pthread_barrier_wait(&started);
    }
    if (pthread_create(&t, NULL, worker, NULL) || pthread_join(t, NULL)) return 1;
    if (owners) {
        pthread_barrier_wait(&done);
        for (int i = 0; i < owners; i++) pthread_join(o[i], NULL);
    }
    for (long i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    return 0;
}
