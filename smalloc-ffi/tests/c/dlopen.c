/* libsmalloc.so loaded with dlopen (not preloaded): its initial-exec TLS
 * must fit the static TLS surplus, threads that existed before the dlopen
 * must work, the program's own malloc stays glibc's, and glibc pointers
 * given to smalloc_free/realloc/usable_size go back to glibc. */
#include "check.h"

#include <malloc.h>
#include <pthread.h>

static void *(*s_malloc)(size_t);
static void (*s_free)(void *);
static void *(*s_realloc)(void *, size_t);
static size_t (*s_usable)(void *);
static bool (*s_owns)(const void *);

static pthread_barrier_t loaded;

static void *worker(void *arg) {
    unsigned tag = (unsigned)(uintptr_t)arg;
    pthread_barrier_wait(&loaded); /* created before the dlopen */
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(i % 500) + 1;
        char *p = s_malloc(n);
        CHECK(p && s_owns(p));
        fill(p, n, tag + (unsigned)i);
        p = s_realloc(p, n + 700);
        CHECK(p && check_fill(p, n, tag + (unsigned)i));
        s_free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    pthread_t t[4];
    pthread_barrier_init(&loaded, NULL, 5);
    for (uintptr_t i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);

    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    s_malloc = (void *(*)(size_t))dlsym(h, "smalloc_malloc");
    s_free = (void (*)(void *))dlsym(h, "smalloc_free");
    s_realloc = (void *(*)(void *, size_t))dlsym(h, "smalloc_realloc");
    s_usable = (size_t(*)(void *))dlsym(h, "smalloc_malloc_usable_size");
    s_owns = (bool (*)(const void *))dlsym(h, "smalloc_owns");
    CHECK(s_malloc && s_free && s_realloc && s_usable && s_owns);
    pthread_barrier_wait(&loaded);

    /* The program's malloc is still glibc's. */
    char *g = malloc(100);
    CHECK(g && !s_owns(g));
    fill(g, 100, 5);
    /* Foreign pointers given to smalloc go back to glibc. */
    CHECK(s_usable(g) >= 100);
    g = s_realloc(g, 100000);
    CHECK(g && !s_owns(g) && check_fill(g, 100, 5));
    s_free(g);
    for (int i = 0; i < 1000; i++) s_free(malloc((size_t)i + 1));

    for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
    puts("dlopen ok");
    return 0;
}
