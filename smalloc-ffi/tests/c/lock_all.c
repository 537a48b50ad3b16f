/* A program that locks all its memory (mlockall(MCL_CURRENT | MCL_FUTURE),
 * as cryptsetup does): blocks allocated before keep their contents, and
 * after the call blocks still come, all locked. Prints "lock ok", or "lock
 * refused <errno>" when the kernel refuses, or "lock skipped" when it could
 * not be made safe to try. RLIMIT_MEMLOCK is made to apply even to root
 * (CAP_IPC_LOCK dropped): a library that locked its whole reservation is
 * then refused, rather than exhausting the machine's memory. */
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"

#define N 200

static size_t size_of(size_t i) { return 16 + (i * 7919) % 2000; }

/* Whether CAP_IPC_LOCK is effective, after trying to drop it. */
static bool can_lock_unlimited(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return true;
    d[0].effective &= ~(1u << CAP_IPC_LOCK);
    (void)syscall(SYS_capset, &h, d);
    if (syscall(SYS_capget, &h, d) != 0)
        return true;
    return (d[0].effective & (1u << CAP_IPC_LOCK)) != 0;
}

int main(void) {
    static char *blocks[N];
    for (size_t i = 0; i < N; i++) {
        blocks[i] = malloc(size_of(i));
        CHECK(blocks[i] != NULL);
        memset(blocks[i], (int)(i & 0xff), size_of(i));
    }
    if (can_lock_unlimited()) {
        puts("lock skipped");
        return 0;
    }
    /* Room for what the program uses (raising it needs CAP_SYS_RESOURCE), far
     * below the reservation. */
    struct rlimit m = {256ul << 20, 256ul << 20};
    if (setrlimit(RLIMIT_MEMLOCK, &m) != 0) {
        CHECK(getrlimit(RLIMIT_MEMLOCK, &m) == 0);
        m.rlim_cur = m.rlim_max;
        (void)setrlimit(RLIMIT_MEMLOCK, &m);
    }
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
        printf("lock refused %d\n", errno);
        return 0;
    }
    char *more = calloc(1, 1 << 20);
    CHECK(more != NULL && more[12345] == 0);
    for (size_t i = 0; i < N; i++) {
        for (size_t k = 0; k < size_of(i); k += 61)
            CHECK(blocks[i][k] == (char)(i & 0xff));
        free(blocks[i]);
    }
    free(more);
    puts("lock ok");
    return 0;
}
