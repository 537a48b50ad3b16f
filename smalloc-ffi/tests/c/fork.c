/* fork() while other threads allocate (and, once a large slot was freed,
 * the purge's thread sweeps): every child must be able to allocate and
 * free (also from a new thread) and exit cleanly. */
#include "check.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

enum { THREADS = 4, FORKS = 40 };

static atomic_int stop;

static void *churn(void *arg) {
    unsigned tag = (unsigned)(uintptr_t)arg;
    char *keep[32] = {0};
    size_t len[32] = {0};
    uint64_t r = 12345 + tag;
    while (!atomic_load(&stop)) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int i = (int)(r % 32);
        if (keep[i]) {
            CHECK(check_fill(keep[i], len[i], tag + (unsigned)i));
            free(keep[i]);
        }
        len[i] = (size_t)(r >> 40) % 5000;
        keep[i] = (r >> 10) % 4 == 0 ? calloc(1, len[i]) : malloc(len[i]);
        CHECK(keep[i] != NULL);
        fill(keep[i], len[i], tag + (unsigned)i);
        if ((r >> 20) % 64 == 1) {
            /* A large slot: its free takes the cold path, which starts the
             * purge's thread. */
            char *m = malloc(100000);
            CHECK(m != NULL);
            fill(m, 100000, tag);
            CHECK(check_fill(m, 100000, tag));
            free(m);
        }
        if ((r >> 20) % 64 == 0) {
            /* Also the big and the foreign-symbol paths. */
            void *b = malloc((size_t)3 << 30);
            CHECK(b != NULL);
            free(b);
        }
    }
    for (int i = 0; i < 32; i++) free(keep[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        char *p = malloc((size_t)i * 13 + 1);
        CHECK(p != NULL);
        fill(p, (size_t)i * 13 + 1, (unsigned)i);
        CHECK(check_fill(p, (size_t)i * 13 + 1, (unsigned)i));
        free(p);
    }
    return NULL;
}

static int child(int round) {
    alarm(30); /* a deadlock fails the test instead of hanging it */
    char *p[200];
    for (int i = 0; i < 200; i++) {
        p[i] = malloc((size_t)(i * 97 % 20000) + 1);
        CHECK(p[i] != NULL && smalloc_owned(p[i]));
        fill(p[i], (size_t)(i * 97 % 20000) + 1, (unsigned)(round + i));
    }
    for (int i = 0; i < 200; i++) {
        p[i] = realloc(p[i], (size_t)(i * 97 % 20000) + 5000);
        CHECK(p[i] != NULL && check_fill(p[i], (size_t)(i * 97 % 20000) + 1, (unsigned)(round + i)));
        free(p[i]);
    }
    void *big = calloc(1, (size_t)3 << 30);
    CHECK(big != NULL);
    free(big);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    return 0;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i * 100)) == 0);
    for (int round = 0; round < FORKS; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child(round));
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d failed: status %#x\n", round, status);
            return 1;
        }
        usleep(1000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    printf("fork ok: %d children while %d threads allocated\n", FORKS, THREADS);
    return 0;
}
