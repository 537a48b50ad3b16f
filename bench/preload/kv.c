/* kv: the heap of a key-value store. Each thread keeps a chained hash
 * table of string keys to values; it fills it, then at random overwrites
 * a value (a new block of about the same size replaces the old one),
 * deletes a key, inserts a new one, or reads and checks a value. A value is
 * a block of a small header (its size and tag) and the payload, filled
 * with a pattern over its pages; keys and table nodes are small blocks of
 * their own. With -v 2048 the values are 2 KiB plus the header, the case
 * where power-of-two size classes waste most; with -v 100, small values. */
#include "common.h"

static const char *usage =
    "usage: kv [-t threads] [-k keys per thread] [-n operations per thread]\n"
    "          [-v value bytes] [-j jitter percent of the value size] [-x seed]\n"
    "  defaults -t 2 -k 20000 -n 200000 -v 2048 -j 5\n"
    "  operations: 50% overwrite, 15% delete, 15% insert, 20% read\n";

typedef struct {
    size_t size;
    uint64_t tag;
} value_t;

typedef struct node {
    struct node *next;
    char *key;
    value_t *value;
} node_t;

enum { HEADER = sizeof(value_t) };

static size_t keys_per_thread, ops, value_bytes, jitter;

typedef struct {
    uint64_t seed;
    int id;
} worker_t;

static uint64_t hash_of(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static value_t *new_value(rng_t *r, uint64_t tag) {
    size_t spread = value_bytes * jitter / 100;
    size_t payload = value_bytes - spread + (size_t)rng_below(r, 2 * spread + 1);
    value_t *v = xmalloc(HEADER + payload);
    v->size = payload;
    v->tag = tag;
    fill(v + 1, payload, tag);
    return v;
}

static void check_value(const value_t *v) {
    size_t spread = value_bytes * jitter / 100;
    if (v->size + spread < value_bytes || v->size > value_bytes + spread) die("kv: value header overwritten");
    check(v + 1, v->size, v->tag, "kv");
}

static void *worker(void *arg) {
    worker_t *w = arg;
    rng_t r;
    rng_seed(&r, w->seed);
    size_t nbuckets = 1;
    while (nbuckets < keys_per_thread) nbuckets <<= 1;
    node_t **table = calloc(nbuckets, sizeof(node_t *));
    if (!table) die("kv: calloc failed");
    /* Key numbers 0..2k: about half present at any time after the fill. */
    size_t space = 2 * keys_per_thread, present = 0;
    char key[48];
    uint64_t tag = (uint64_t)w->id << 40;
    for (size_t i = 0; i < ops + keys_per_thread; i++) {
        int filling = i < keys_per_thread;
        uint64_t op = filling ? 99 : rng_below(&r, 100);
        size_t k = filling ? i : (size_t)rng_below(&r, space);
        int n = snprintf(key, sizeof key, "user:%d:%zu", w->id, k);
        node_t **at = &table[hash_of(key) & (nbuckets - 1)];
        while (*at && strcmp((*at)->key, key) != 0) at = &(*at)->next;
        node_t *e = *at;
        if (op < 50) { /* overwrite */
            if (e) {
                check_value(e->value);
                free(e->value);
                e->value = new_value(&r, ++tag);
            }
        } else if (op < 65) { /* delete */
            if (e) {
                check_value(e->value);
                *at = e->next;
                free(e->value);
                free(e->key);
                free(e);
                present--;
            }
        } else if (op < 80) { /* read */
            if (e) check_value(e->value);
        } else if (!e) { /* insert */
            e = xmalloc(sizeof *e);
            e->key = xmalloc((size_t)n + 1);
            memcpy(e->key, key, (size_t)n + 1);
            e->value = new_value(&r, ++tag);
            e->next = NULL;
            *at = e;
            present++;
        }
    }
    size_t left = 0;
    for (size_t b = 0; b < nbuckets; b++) {
        for (node_t *e = table[b]; e;) {
            node_t *next = e->next;
            check_value(e->value);
            free(e->value);
            free(e->key);
            free(e);
            left++;
            e = next;
        }
    }
    if (left != present) die("kv: lost a key");
    free(table);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, opt;
    uint64_t seed = 42;
    keys_per_thread = 20000;
    ops = 200000;
    value_bytes = 2048;
    jitter = 5;
    while ((opt = getopt(argc, argv, "t:k:n:v:j:x:")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'k': keys_per_thread = parse_size(optarg, usage); break;
        case 'n': ops = parse_size(optarg, usage); break;
        case 'v': value_bytes = parse_size(optarg, usage); break;
        case 'j': jitter = parse_size(optarg, usage); break;
        case 'x': seed = parse_size(optarg, usage); break;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (threads < 1 || keys_per_thread < 1 || value_bytes < 8 || jitter > 50) {
        fputs(usage, stderr);
        return 2;
    }
    worker_t *w = xmalloc(sizeof(worker_t) * (size_t)threads);
    for (int i = 0; i < threads; i++) w[i] = (worker_t){seed + (uint64_t)i * 7919, i};
    double t0 = now_sec();
    run_threads(threads, worker, w, sizeof *w);
    printf("kv: threads=%d keys=%zu ops=%zu value=%zu jitter=%zu%% elapsed=%.3f s\n", threads,
           keys_per_thread, ops, value_bytes, jitter, now_sec() - t0);
    free(w);
    return 0;
}
