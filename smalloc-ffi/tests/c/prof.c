/* Heap profiling under LD_PRELOAD of the profiling library: two allocation
 * sites of 48 MiB and 16 MiB of 256-byte blocks, kept live (3:1), a third
 * that frees its 16 MiB, a fourth that keeps one big block (3 GiB + 1,
 * a mapping of its own, never touched) and frees another (after moving it
 * with realloc); then smalloc_prof_dump to the paths given on the
 * command line (by extension: .svg, .folded, else pprof). Built with frame
 * pointers, so both unwinders see the sites. With "signal", raises
 * SIGUSR2 and allocates on, for the dump the signal asks for. */
#include "check.h"

#include <signal.h>

typedef int (*dump_fn)(const char *);

enum { BLOCK = 256, MIB = 1 << 20 };

__attribute__((noinline)) static void **site_three(void) {
    size_t n = 48 * MIB / BLOCK;
    void **v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(BLOCK);
        CHECK(v[i] != NULL);
        memset(v[i], (int)i, 8);
    }
    return v;
}

__attribute__((noinline)) static void **site_one(void) {
    size_t n = 16 * MIB / BLOCK;
    void **v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(BLOCK);
        CHECK(v[i] != NULL);
        memset(v[i], (int)i, 8);
    }
    return v;
}

__attribute__((noinline)) static void site_freed(void) {
    size_t n = 16 * MIB / BLOCK;
    void **v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = malloc(BLOCK);
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

enum { BIG = 3 };

__attribute__((noinline)) static void *site_big(void) {
    size_t n = ((size_t)BIG << 30) + 1;
    char *gone = malloc(n);
    CHECK(gone != NULL);
    gone = realloc(gone, n + MIB);
    CHECK(gone != NULL);
    free(gone);
    char *p = malloc(n);
    CHECK(p != NULL);
    p[0] = 1;
    return p;
}

int main(int argc, char **argv) {
    dump_fn dump = (dump_fn)dlsym(RTLD_DEFAULT, "smalloc_prof_dump");
    CHECK(dump != NULL);
    void **a = site_three(), **b = site_one();
    site_freed();
    void *big = site_big();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "signal") == 0) {
            CHECK(raise(SIGUSR2) == 0);
            void **c = site_one(); /* samples after the signal: the dump */
            (void)c;
        } else {
            CHECK(dump(argv[i]) == 0);
        }
    }
    errno = 0;
    CHECK(dump(NULL) == -1 && errno == EINVAL);
    printf("prof ok %p %p %p\n", (void *)a, (void *)b, big);
    return 0;
}
