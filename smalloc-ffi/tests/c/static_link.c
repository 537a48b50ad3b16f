/* A program linked with libsmalloc.a that calls the prefixed API through
 * smalloc.h. The archive also defines malloc, free, ..., so the program's
 * (and its C library's) allocations come from smalloc as well. */
#include "smalloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static void *worker(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(i % 300) + 1;
        unsigned char *p = smalloc_malloc(n);
        CHECK(p && smalloc_owns(p));
        memset(p, (int)(id + (uintptr_t)i), n);
        p = smalloc_realloc(p, n * 3);
        CHECK(p && p[n - 1] == (unsigned char)(id + (uintptr_t)i));
        smalloc_free(p);
    }
    return NULL;
}

int main(void) {
    void *p = smalloc_malloc(0);
    CHECK(p && smalloc_owns(p) && smalloc_malloc_usable_size(p) >= 16);
    smalloc_free(p);
    unsigned char *c = smalloc_calloc(100, 10);
    CHECK(c && c[999] == 0);
    smalloc_free_sized(c, 1000);
    errno = 0;
    CHECK(smalloc_calloc(SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(smalloc_aligned_alloc(48, 10) == NULL && errno == EINVAL);
    p = smalloc_aligned_alloc(1 << 16, 10);
    CHECK(p && (uintptr_t)p % (1 << 16) == 0);
    smalloc_free_aligned_sized(p, 1 << 16, 10);
    p = smalloc_memalign(64, 10);
    CHECK(p && (uintptr_t)p % 64 == 0);
    smalloc_free(p);
    CHECK(smalloc_posix_memalign(&p, 12, 10) == EINVAL);
    CHECK(smalloc_posix_memalign(&p, 4096, 10) == 0 && (uintptr_t)p % 4096 == 0);
    smalloc_free(p);
    p = smalloc_valloc(1);
    CHECK(p && (uintptr_t)p % 4096 == 0);
    smalloc_free(p);
    p = smalloc_pvalloc(1);
    CHECK(p && smalloc_malloc_usable_size(p) >= 4096);
    smalloc_free(p);
    p = smalloc_reallocarray(NULL, 10, 10);
    CHECK(p && smalloc_reallocarray(p, SIZE_MAX, 2) == NULL && errno == ENOMEM);
    smalloc_free(p);
    p = smalloc_malloc((size_t)3 << 30);
    CHECK(p && smalloc_owns(p) && smalloc_malloc_usable_size(p) >= ((size_t)3 << 30));
    smalloc_free(p);

    /* The archive's malloc is smalloc's too. */
    char *m = malloc(10);
    CHECK(smalloc_owns(m));
    free(m);
    char *d = strdup("through the C library");
    CHECK(smalloc_owns(d));
    free(d);

    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
    puts("static ok");
    return 0;
}
