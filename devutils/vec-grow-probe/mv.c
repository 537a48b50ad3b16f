/* Cost of moving n bytes between two resident "slots" of one reservation,
 * median of 200, for n = 4 KiB .. 1 MiB: memcpy; mremap+mmap refill;
 * mremap DONTUNMAP; UFFDIO_MOVE into an empty destination; MADV_DONTNEED of
 * a resident destination + UFFDIO_MOVE; and the cost per page of faulting
 * an emptied page back in. ./mv 0 (one thread) or ./mv 1 (a second thread
 * spinning, so TLB flushes need IPIs).  gcc -O2 -o mv mv.c -lpthread */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <linux/userfaultfd.h>
#include <unistd.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <fcntl.h>
struct uffdio_move_ { uint64_t dst, src, len, mode; int64_t move; };
#define UFFDIO_MOVE_ _IOWR(0xAA, 0x05, struct uffdio_move_)
#define UFFD_FEATURE_MOVE_ (1ull<<16)
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static volatile int stop;
static void*spin(void*a){ while(!stop) __asm__ volatile("pause"); return 0;}
static int uffd;
static char*base; static size_t R=1ul<<38;
static void touch(char*p,size_t n){for(size_t i=0;i<n;i+=4096)p[i]=1;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int threads=argc>1?atoi(argv[1]):0;
  pthread_t th; if(threads){pthread_create(&th,0,spin,0);}
  base=mmap(0,R,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  uffd=syscall(SYS_userfaultfd, O_CLOEXEC|O_NONBLOCK|UFFD_USER_MODE_ONLY);
  if(uffd<0){perror("userfaultfd");}
  struct uffdio_api api={.api=UFFD_API,.features=UFFD_FEATURE_MOVE_};
  if(ioctl(uffd,UFFDIO_API,&api)){perror("UFFDIO_API");}
  struct uffdio_register reg={.range={.start=(uint64_t)base,.len=R},.mode=UFFDIO_REGISTER_MODE_WP};
  if(ioctl(uffd,UFFDIO_REGISTER,&reg)){perror("UFFDIO_REGISTER");}
  printf("features=%llx ioctls=%llx\n",(unsigned long long)api.features,(unsigned long long)reg.ioctls);
  char*A=base+(1ul<<34), *B=base+(2ul<<34); char*A2=base+(3ul<<34), *B2=base+(4ul<<34); char*A3=base+(5ul<<34),*B3=base+(6ul<<34);
  int reps=200;
  printf("threads=%d (spinner on other cpu: TLB shootdowns)\n",threads);
  printf("%8s %10s %10s %10s %10s %10s %10s\n","KiB","memcpy","mremap+mm","dontunmap","uffd_move","dn+uffd","fault/pg");
  for(size_t n=4096;n<=(1u<<20);n*=2){
    double t[6][400];
    for(int r=0;r<reps;r++){
      /* memcpy hot resident */
      touch(A,n);touch(B,n);
      double t0=now(); memcpy(B,A,n); t[0][r]=now()-t0;
      /* mremap + refill */
      touch(A2,n);touch(B2,n);
      t0=now();
      if(mremap(A2,n,n,MREMAP_MAYMOVE|MREMAP_FIXED,B2)==MAP_FAILED)perror("mremap");
      if(mmap(A2,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_FIXED,-1,0)==MAP_FAILED)perror("mmap");
      t[1][r]=now()-t0;
      /* dontunmap */
      touch(A3,n);touch(B3,n);
      t0=now();
      if(mremap(A3,n,n,MREMAP_MAYMOVE|MREMAP_FIXED|MREMAP_DONTUNMAP,B3)==MAP_FAILED)perror("dontunmap");
      t[2][r]=now()-t0;
      /* uffd move into empty dst */
      touch(A,n); madvise(B,n,MADV_DONTNEED);
      struct uffdio_move_ mv={.dst=(uint64_t)B,.src=(uint64_t)A,.len=n,.mode=0};
      t0=now();
      if(ioctl(uffd,UFFDIO_MOVE_,&mv)){perror("UFFDIO_MOVE");return 1;}
      t[3][r]=now()-t0;
      /* dontneed dst + uffd move (dst resident) */
      touch(A,n); touch(B,n);
      mv.move=0;
      t0=now();
      madvise(B,n,MADV_DONTNEED);
      if(ioctl(uffd,UFFDIO_MOVE_,&mv)){perror("UFFDIO_MOVE2");return 1;}
      t[4][r]=now()-t0;
      /* fault-in cost per page of now-empty A */
      madvise(A,n,MADV_DONTNEED);
      t0=now(); touch(A,n); t[5][r]=(now()-t0)/(n/4096);
    }
    printf("%8zu",n>>10);
    for(int k=0;k<6;k++){qsort(t[k],reps,sizeof(double),cmp);printf(" %10.0f",t[k][reps/2]);}
    printf("\n");
  }
  stop=1; if(threads)pthread_join(th,0);
  return 0;
}
