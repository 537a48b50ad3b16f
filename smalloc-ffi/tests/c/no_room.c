/* Under an address-space limit that may leave no room for smalloc: prints
 * the address space at main ("vm BYTES"), then what malloc(100) and
 * calloc(1, 1 MiB) gave ("ok", or "null" and errno) and checks a block it
 * got by writing and reading it back. Writes with write(2) and formats
 * with snprintf into a stack buffer: nothing here allocates but the calls
 * under test. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(const char *s) { (void)!write(1, s, strlen(s)); }

/* The first number of /proc/self/statm (pages of address space), in bytes. */
static long vm_bytes(void) {
    char buf[64] = {0};
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    (void)!read(fd, buf, sizeof buf - 1);
    close(fd);
    return atol(buf) * sysconf(_SC_PAGESIZE);
}

/* One call's result: "ok" after a write and read back, or "null <errno>". */
static void report(const char *what, char *p, int err, size_t n) {
    char line[96];
    if (p == NULL) {
        snprintf(line, sizeof line, "%s null %d\n", what, err);
    } else {
        memset(p, 0x5a, n);
        int good = p[0] == 0x5a && p[n - 1] == 0x5a;
        snprintf(line, sizeof line, "%s %s\n", what, good ? "ok" : "corrupt");
    }
    say(line);
}

int main(void) {
    char line[64];
    snprintf(line, sizeof line, "vm %ld\n", vm_bytes());
    say(line);
    errno = 0;
    char *p = malloc(100);
    report("malloc", p, errno, 100);
    errno = 0;
    char *q = calloc(1, 1 << 20);
    int err = errno;
    if (q != NULL && (q[0] != 0 || q[(1 << 20) - 1] != 0))
        say("calloc not zero\n");
    report("calloc", q, err, 1 << 20);
    free(p);
    free(q);
    return 0;
}
