/* The C side of the entry-point overhead measurement (see overhead.sh):
 * N malloc/free pairs of 32 bytes, through the PLT as any program does. */
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(32);
        free(p);
    }
    return 0;
}
