/* vec-grow's copies alone (one vector at a time, slots at smalloc's
 * addresses), for a growers ladder given as size classes:
 *   ./emu 6 7 12 14 16 18 21   (the ladder before the change)
 * gcc -O2 -o emu emu.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static uint64_t s=1; static uint64_t rnd(void){s+=0x9e3779b97f4a7c15;uint64_t z=s;z=(z^(z>>30))*0xbf58476d1ce4e5b9;z=(z^(z>>27))*0x94d049bb133111eb;return z^(z>>31);}
static char*base;
static char* slot(int sc){ return base + ((size_t)sc<<34) + 0; } /* one live vector: always slot 0 of each class */
static int lad[16]; static int nl;
static int grower(int sc){for(int i=0;i<nl;i++)if(lad[i]>=sc)return lad[i];return sc;}
int main(int argc,char**argv){
  nl=0; for(int i=1;i<argc;i++) lad[nl++]=atoi(argv[i]);
  base=mmap(0,1ul<<40,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  base=(char*)(((uintptr_t)base+(1ul<<39)-1)&~((1ul<<39)-1));
  for(int rep=0;rep<5;rep++){
  long ops=0; double copied=0; double t0=now();
  while(ops<300000){
    int bits=3+rnd()%18; size_t lo=1ul<<bits, hi=(1ul<<bits)*2-1; if(hi>(1u<<20))hi=1u<<20; size_t target=lo+rnd()%(hi-lo+1);
    size_t cap=8; int sc=3; char*p=slot(3); p[0]=1;p[cap-1]=1; ops++;
    while(cap<target){ size_t nc=cap*2; int nsc=__builtin_ctzl(nc); if(nsc>sc){int g=grower(nsc); char*q=slot(g); memcpy(q,p,cap); copied+=cap; p=q; sc=g;} cap=nc; p[0]=2; p[cap-1]=2; ops++; }
  }
  double t=now()-t0; printf("ns/op %.1f  copy B/op %.0f  GB/s %.1f\n",t/ops,copied/ops,copied/t);
  }
}
