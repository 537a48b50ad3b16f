/* The C side of the remote-free measurement (see overhead.sh): the main
 * thread allocates N blocks of 16 B to about 1 KiB; a second thread, which
 * allocated a block of its own first (so that both allocate, as in a
 * producer/consumer pipeline), frees them all in `free_all`, the function
 * the measurement counts. */
#include <pthread.h>
#include <stdlib.h>

static void **blocks;
static long n;

__attribute__((noinline)) void free_all(void) {
    for (long i = 0; i < n; i++) free(blocks[i]);
}

static void *consumer(void *arg) {
    (void)arg;
    void *volatile own = malloc(16);
    free(own);
    free_all();
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 1000000;
    blocks = malloc(n * sizeof *blocks);
    if (!blocks) return 1;
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc(16 + (size_t)(i * 37) % 1000);
        if (!blocks[i]) return 1;
        *(volatile char *)blocks[i] = 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, consumer, NULL) || pthread_join(t, NULL)) return 1;
    free(blocks);
    return 0;
}
