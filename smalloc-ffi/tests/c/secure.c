/* The secure library's checks from C (argv[1] picks the bug): a double
 * free, a free of a pointer inside a block, a write into a freed block
 * before the next malloc of its size, a double free from another thread;
 * "fill" prints what a freed block's bytes past its first 16 read as;
 * "clean" runs a correct mix of calls (and must finish). */
#include "check.h"

#include <pthread.h>

static void *free_it(void *p) {
    free(p);
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *bug = argv[1];
    char *p = malloc(64);
    CHECK(p != NULL);
    memset(p, 0x11, 64);
    if (strcmp(bug, "double-free") == 0) {
        free(p);
        free(p);
    } else if (strcmp(bug, "interior") == 0) {
        free(p + 16);
    } else if (strcmp(bug, "write-after-free") == 0) {
        free(p);
        memset(p, 0x41, 16);
        (void)malloc(64);
    } else if (strcmp(bug, "thread-double-free") == 0) {
        for (int i = 0; i < 2; i++) {
            pthread_t t;
            CHECK(pthread_create(&t, NULL, free_it, p) == 0);
            CHECK(pthread_join(t, NULL) == 0);
        }
    } else if (strcmp(bug, "fill") == 0) {
        free(p);
        unsigned lo = 255, hi = 0;
        for (int i = 16; i < 64; i++) {
            unsigned char c = ((volatile unsigned char *)p)[i];
            lo = c < lo ? c : lo;
            hi = c > hi ? c : hi;
        }
        printf("fill %u %u\n", lo, hi);
        return 0;
    } else if (strcmp(bug, "clean") == 0) {
        void *v[1000];
        for (int round = 0; round < 20; round++) {
            for (int i = 0; i < 1000; i++) {
                v[i] = (i % 3) ? malloc((size_t)(i * 37 % 5000) + 1) : calloc(3, (size_t)i + 1);
                CHECK(v[i] != NULL);
            }
            for (int i = 0; i < 1000; i += 2) {
                v[i] = realloc(v[i], (size_t)(i * 91 % 70000) + 1);
                CHECK(v[i] != NULL);
            }
            for (int i = 0; i < 1000; i++) free(v[i]);
        }
        free(p);
    } else {
        CHECK(!"unknown bug");
    }
    printf("secure: not stopped\n");
    return 0;
}
