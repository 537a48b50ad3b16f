/* vec-grow through the C API: doubling realloc from 8 bytes to a random
 * length (log-uniform up to 1 MiB), first and last byte written per
 * capacity, then free; ns per op (alloc or realloc). */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static uint64_t s=1; static uint64_t rnd(void){s+=0x9e3779b97f4a7c15;uint64_t z=s;z=(z^(z>>30))*0xbf58476d1ce4e5b9;z=(z^(z>>27))*0x94d049bb133111eb;return z^(z>>31);}
int main(int argc,char**argv){
  long n=argc>1?atol(argv[1]):1000000; struct timespec a,b; long ops=0;
  clock_gettime(CLOCK_MONOTONIC,&a);
  while(ops<n){ int bits=3+rnd()%18; size_t lo=1ul<<bits,hi=(1ul<<bits)*2-1; if(hi>(1u<<20))hi=1u<<20; size_t target=lo+rnd()%(hi-lo+1);
    size_t cap=8; volatile char*p=malloc(cap); p[0]=1;p[cap-1]=1; ops++;
    while(cap<target&&ops<n){ cap*=2; p=realloc((void*)p,cap); p[0]=2; p[cap-1]=2; ops++; }
    free((void*)p); }
  clock_gettime(CLOCK_MONOTONIC,&b);
  printf("%.1f ns/op\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/ops);
}
