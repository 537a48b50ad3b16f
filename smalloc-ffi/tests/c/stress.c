/* Multi-threaded stress: every thread allocates blocks of random sizes,
 * fills them, keeps some, and sends others to another thread, which checks
 * the contents and frees them (cross-thread frees). Then thousands of
 * short-lived threads allocate and free. */
#include "check.h"

#include <malloc.h>
#include <pthread.h>

enum { THREADS = 8, OPS = 60000, MAILBOX = 256, LOCAL = 64, WAVES = 40, WAVE = 100 };

struct msg {
    char *p;
    size_t len;
    unsigned tag;
};

struct mailbox {
    pthread_mutex_t mu;
    struct msg q[MAILBOX];
    int n;
};

static struct mailbox boxes[THREADS];

static uint64_t next_rand(uint64_t *r) {
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    return *r;
}

static size_t rand_size(uint64_t *r) {
    uint64_t x = next_rand(r);
    switch (x % 16) {
    case 0: return (size_t)(x >> 8) % 70000;
    case 1: case 2: return (size_t)(x >> 8) % 4096;
    default: return 1 + (size_t)(x >> 8) % 256;
    }
}

static void check_and_free(struct msg m) {
    CHECK(check_fill(m.p, m.len, m.tag));
    CHECK(smalloc_owned(m.p));
    free(m.p);
}

/* Drains this thread's mailbox. */
static void drain(int me) {
    struct msg got[MAILBOX];
    pthread_mutex_lock(&boxes[me].mu);
    int n = boxes[me].n;
    memcpy(got, boxes[me].q, (size_t)n * sizeof got[0]);
    boxes[me].n = 0;
    pthread_mutex_unlock(&boxes[me].mu);
    for (int i = 0; i < n; i++) check_and_free(got[i]);
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    struct msg local[LOCAL] = {{0}};
    for (int op = 0; op < OPS; op++) {
        size_t len = rand_size(&r);
        unsigned tag = (unsigned)(me * 1000003 + op);
        char *p = (op % 7 == 0) ? calloc(1, len) : malloc(len);
        CHECK(p != NULL && (uintptr_t)p % 16 == 0);
        if (op % 7 == 0)
            for (size_t i = 0; i < len; i++) CHECK(p[i] == 0);
        fill(p, len, tag);
        struct msg m = {p, len, tag};
        uint64_t x = next_rand(&r);
        if (x % 3 == 0) {
            /* Send it to another thread. */
            int to = (int)((x >> 8) % THREADS);
            pthread_mutex_lock(&boxes[to].mu);
            if (boxes[to].n < MAILBOX) {
                boxes[to].q[boxes[to].n++] = m;
                m.p = NULL;
            }
            pthread_mutex_unlock(&boxes[to].mu);
            if (m.p) check_and_free(m);
        } else {
            /* Keep it, replacing (and checking) an older one; sometimes
             * grow the kept block first. */
            int slot = (int)((x >> 8) % LOCAL);
            if (local[slot].p) {
                if (x % 5 == 1) {
                    size_t nl = local[slot].len * 2 + 10;
                    char *q = realloc(local[slot].p, nl);
                    CHECK(q && check_fill(q, local[slot].len, local[slot].tag));
                    fill(q, nl, local[slot].tag);
                    local[slot].p = q;
                    local[slot].len = nl;
                }
                check_and_free(local[slot]);
            }
            local[slot] = m;
        }
        if (op % 64 == 0) drain(me);
    }
    for (int i = 0; i < LOCAL; i++)
        if (local[i].p) check_and_free(local[i]);
    return NULL;
}

static void *short_lived(void *arg) {
    unsigned tag = (unsigned)(uintptr_t)arg;
    char *p[16];
    for (int i = 0; i < 16; i++) {
        p[i] = malloc(16 + (size_t)i * 40);
        CHECK(p[i] != NULL);
        fill(p[i], 16 + (size_t)i * 40, tag + (unsigned)i);
    }
    for (int i = 0; i < 16; i++) {
        CHECK(check_fill(p[i], 16 + (size_t)i * 40, tag + (unsigned)i));
        free(p[i]);
    }
    /* Hand one block to the joining thread. */
    char *out = malloc(64);
    fill(out, 64, tag);
    return out;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_mutex_init(&boxes[i].mu, NULL);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    for (int i = 0; i < THREADS; i++) drain(i);

    /* Thousands of threads, in waves of WAVE live at once. */
    for (int w = 0; w < WAVES; w++) {
        pthread_t s[WAVE];
        for (int i = 0; i < WAVE; i++)
            CHECK(pthread_create(&s[i], NULL, short_lived, (void *)(uintptr_t)(w * WAVE + i)) == 0);
        for (int i = 0; i < WAVE; i++) {
            void *out;
            CHECK(pthread_join(s[i], &out) == 0);
            CHECK(check_fill(out, 64, (unsigned)(w * WAVE + i)));
            free(out);
        }
    }
    printf("stress ok: %d threads x %d ops, %d short-lived threads\n", THREADS, OPS, WAVES * WAVE);
    return 0;
}
