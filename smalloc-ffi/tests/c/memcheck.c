/* Bugs for valgrind's memcheck to find, one per argument, and a clean run:
 * tests/valgrind.rs runs each under memcheck with glibc's malloc and with
 * the valgrind build of libsmalloc.so preloaded, and compares the reports. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps the compiler from dropping or folding the accesses. */
static volatile unsigned char sink;

static void use(const void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* Allocations of many size classes, written, resized and freed: no error. */
static int clean(void) {
    void *keep[64];
    for (int i = 0; i < 64; i++) {
        size_t n = (size_t)1 << (i % 20);
        keep[i] = i % 3 ? malloc(n + i) : calloc(1, n + i);
        memset(keep[i], i, n + i);
    }
    for (int i = 0; i < 64; i++) {
        size_t n = (size_t)1 << (i % 20);
        keep[i] = realloc(keep[i], i % 2 ? 2 * n + 7 : n / 2 + 1);
        unsigned char *c = keep[i];
        sink = c[0];
    }
    char *s = malloc(10);
    strcpy(s, "smalloc");
    s = realloc(s, 100); /* grows in its slot */
    strcat(s, " under memcheck");
    puts(s);
    free(s);
    void *big = malloc(40 << 20); /* past the valgrind build's largest slot */
    memset(big, 1, 40 << 20);
    big = realloc(big, 80 << 20);
    free(big);
    /* Which allocator served the blocks (memcheck may replace malloc). */
    bool (*owns)(const void *) = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "smalloc_owns");
    printf("served by smalloc: %s\n", owns && owns(keep[0]) ? "yes" : "no");
    for (int i = 0; i < 64; i++)
        free(keep[i]);
    return 0;
}

/* 1234 bytes definitely lost, 567 still reachable (in a global). */
void *reachable;
static int leak(void) {
    void *p = malloc(1234);
    memset(p, 7, 1234);
    use(p);
    p = NULL;
    reachable = malloc(567);
    return 0;
}

/* A read and a write after free. */
static int use_after_free(void) {
    unsigned char *p = malloc(48);
    memset(p, 1, 48);
    free(p);
    /* Another block of the same size: smalloc's quarantine keeps p apart. */
    void *q = malloc(48);
    sink = p[8];
    p[16] = 2;
    free(q);
    return 0;
}

/* A branch on bytes malloc did not initialise, and on a realloc's new tail. */
static int uninit(void) {
    unsigned char *p = malloc(64);
    use(p);
    if (p[10] == 42)
        puts("42");
    unsigned char *q = calloc(1, 32);
    q = realloc(q, 40); /* in place in smalloc: bytes 32..39 are new */
    if (q[36] == 1)
        puts("1");
    if (q[4] == 1) /* calloc'd: defined, no error */
        puts("1");
    free(p);
    free(q);
    return 0;
}

/* One byte past the block (inside smalloc's slot: its padding). */
static int overflow(void) {
    unsigned char *p = malloc(20);
    memset(p, 0, 20);
    sink = p[20];
    p[21] = 1;
    free(p);
    return 0;
}

/* free twice, then an interior pointer. */
static int bad_free(void) {
    unsigned char *p = malloc(32);
    free(p);
    free(p);
    unsigned char *q = malloc(100);
    free(q + 8);
    free(q);
    /* The heap still works: no block handed out twice. */
    void *a = malloc(32), *b = malloc(32);
    if (a == b)
        return 1;
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "clean";
    if (!strcmp(what, "clean"))
        return clean();
    if (!strcmp(what, "leak"))
        return leak();
    if (!strcmp(what, "use-after-free"))
        return use_after_free();
    if (!strcmp(what, "uninit"))
        return uninit();
    if (!strcmp(what, "overflow"))
        return overflow();
    if (!strcmp(what, "bad-free"))
        return bad_free();
    fprintf(stderr, "unknown: %s\n", what);
    return 2;
}
