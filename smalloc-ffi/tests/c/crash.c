/* Keeps a block holding a known string, prints its address and crashes
 * (abort): the core dump test looks for the string in the core file. Some
 * more of a typical heap is allocated first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char *keep[1000];
    for (int i = 0; i < 1000; i++) {
        keep[i] = malloc(16 + (size_t)i * 8);
        memset(keep[i], i & 0xff, 16 + (size_t)i * 8);
    }
    char *block = malloc(100);
    strcpy(block, "smalloc-c-core-marker-0123456789");
    printf("MARKER_AT %p %p\n", (void *)block, (void *)keep[999]);
    fflush(stdout);
    abort();
}
