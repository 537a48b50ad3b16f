/* memcpy strategies for 4 KiB .. 2 MiB (source just written, destination
 * stale): glibc memcpy, an AVX2 loop, non-temporal stores, rep movsb,
 * rep movsq.  gcc -O2 -mavx2 -o cp cp.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <immintrin.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
__attribute__((noinline)) void avx(char*d,const char*s,size_t n){for(size_t i=0;i<n;i+=128){__m256i a=_mm256_load_si256((void*)(s+i)),b=_mm256_load_si256((void*)(s+i+32)),c=_mm256_load_si256((void*)(s+i+64)),e=_mm256_load_si256((void*)(s+i+96));_mm256_store_si256((void*)(d+i),a);_mm256_store_si256((void*)(d+i+32),b);_mm256_store_si256((void*)(d+i+64),c);_mm256_store_si256((void*)(d+i+96),e);}}
__attribute__((noinline)) void nt(char*d,const char*s,size_t n){for(size_t i=0;i<n;i+=128){__m256i a=_mm256_load_si256((void*)(s+i)),b=_mm256_load_si256((void*)(s+i+32)),c=_mm256_load_si256((void*)(s+i+64)),e=_mm256_load_si256((void*)(s+i+96));_mm256_stream_si256((void*)(d+i),a);_mm256_stream_si256((void*)(d+i+32),b);_mm256_stream_si256((void*)(d+i+64),c);_mm256_stream_si256((void*)(d+i+96),e);}_mm_sfence();}
__attribute__((noinline)) void movsb(char*d,const char*s,size_t n){__asm__ volatile("rep movsb":"+D"(d),"+S"(s),"+c"(n)::"memory");}
__attribute__((noinline)) void movsq(char*d,const char*s,size_t n){n/=8;__asm__ volatile("rep movsq":"+D"(d),"+S"(s),"+c"(n)::"memory");}
int main(){
  char*A=mmap(0,64<<20,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*B=A+(32<<20); memset(A,1,64<<20);
  int reps=300;
  printf("%6s %9s %9s %9s %9s %9s (ns, median)\n","KiB","memcpy","avx2","nt","movsb","movsq");
  for(size_t n=4096;n<=(2u<<20);n*=2){
    double t[5][300];
    for(int r=0;r<reps;r++){
      for(int k=0;k<5;k++){
        /* emulate: src recently written, dst stale */
        for(size_t i=0;i<n;i+=64)A[i]++;
        double t0=now();
        switch(k){case 0:memcpy(B,A,n);break;case 1:avx(B,A,n);break;case 2:nt(B,A,n);break;case 3:movsb(B,A,n);break;case 4:movsq(B,A,n);break;}
        t[k][r]=now()-t0;
      }
    }
    printf("%6zu",n>>10);
    for(int k=0;k<5;k++){qsort(t[k],reps,sizeof(double),cmp);printf(" %9.0f",t[k][reps/2]);}
    printf("\n");
  }
}
