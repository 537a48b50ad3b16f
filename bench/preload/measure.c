/* measure: runs a program, optionally with LD_PRELOAD set for it alone
 * (not for this wrapper), and reports its wall time and, from wait4(), its
 * peak resident set and CPU times.
 *
 *   measure [-p LIB] [-o FILE] -- PROGRAM [ARGS...]
 *
 * prints (to FILE, or stderr) one line: "wall_s maxrss_kib user_s sys_s status"
 * and exits with the program's exit status (128 + signal if it died). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double tv_sec(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6; }

int main(int argc, char **argv) {
    const char *preload = NULL, *out = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "+p:o:")) != -1) {
        switch (opt) {
        case 'p': preload = optarg; break;
        case 'o': out = optarg; break;
        default: fputs("usage: measure [-p LIB] [-o FILE] -- PROGRAM [ARGS...]\n", stderr); return 2;
        }
    }
    if (optind >= argc) {
        fputs("measure: no program given\n", stderr);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        perror("measure: fork");
        return 2;
    }
    if (pid == 0) {
        if (preload && setenv("LD_PRELOAD", preload, 1) != 0) _exit(127);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "measure: exec %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("measure: wait4");
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *f = out ? fopen(out, "w") : stderr;
    if (!f) {
        perror("measure: open output");
        return 2;
    }
    fprintf(f, "%.4f %ld %.4f %.4f %d\n", wall, ru.ru_maxrss, tv_sec(ru.ru_utime), tv_sec(ru.ru_stime),
            code);
    if (out) fclose(f);
    return code;
}
