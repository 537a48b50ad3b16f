/* Every aligned entry point, for every alignment from 1 to 1 MiB. */
#include "check.h"

#include <malloc.h>
#include <unistd.h>

extern void *__libc_memalign(size_t, size_t);

enum { ALIGNED_ALLOC, MEMALIGN, POSIX_MEMALIGN, LIBC_MEMALIGN, NUM_KINDS };
static const char *names[] = {"aligned_alloc", "memalign", "posix_memalign", "__libc_memalign"};

static void *alloc(int kind, size_t align, size_t size) {
    void *p = NULL;
    switch (kind) {
    case ALIGNED_ALLOC: return aligned_alloc(align, size);
    case MEMALIGN: return memalign(align, size);
    case LIBC_MEMALIGN: return __libc_memalign(align, size);
    default:
        if (align < sizeof(void *)) {
            /* Not a multiple of sizeof(void *): EINVAL, errno untouched. */
            errno = 55;
            CHECK(posix_memalign(&p, align, size) == EINVAL && errno == 55 && p == NULL);
            align = sizeof(void *);
        }
        CHECK(posix_memalign(&p, align, size) == 0);
        return p;
    }
}

int main(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned tag = 0;
    for (int kind = 0; kind < NUM_KINDS; kind++) {
        for (size_t align = 1; align <= ((size_t)1 << 20); align <<= 1) {
            size_t sizes[] = {0, 1, align - 1, align, align + 1, 3 * align, 100, 5000};
            void *live[8];
            size_t lens[8];
            for (int s = 0; s < 8; s++) {
                size_t size = sizes[s];
                void *p = alloc(kind, align, size);
                if (p == NULL || (uintptr_t)p % align != 0 || !smalloc_owned(p) ||
                    malloc_usable_size(p) < size) {
                    fprintf(stderr, "%s(%zu, %zu) = %p (usable %zu)\n", names[kind], align,
                            size, p, p ? malloc_usable_size(p) : 0);
                    return 1;
                }
                /* malloc's own guarantee holds for every aligned block. */
                CHECK((uintptr_t)p % 16 == 0);
                fill(p, size, tag + (unsigned)s);
                live[s] = p;
                lens[s] = size;
            }
            /* All eight are live at once: none overwrote another. */
            for (int s = 0; s < 8; s++) {
                CHECK(check_fill(live[s], lens[s], tag + (unsigned)s));
                free(live[s]);
            }
            tag += 8;
        }
    }
    /* valloc and pvalloc: page alignment. */
    for (size_t size = 0; size <= 3 * page; size += page / 2) {
        void *v = valloc(size), *pv = pvalloc(size);
        CHECK(v && (uintptr_t)v % page == 0 && malloc_usable_size(v) >= size);
        size_t rounded = size == 0 ? page : (size + page - 1) / page * page;
        CHECK(pv && (uintptr_t)pv % page == 0 && malloc_usable_size(pv) >= rounded);
        fill(v, size, 1);
        fill(pv, rounded, 2);
        CHECK(check_fill(v, size, 1) && check_fill(pv, rounded, 2));
        free(v);
        free(pv);
    }
    puts("alignment ok");
    return 0;
}
