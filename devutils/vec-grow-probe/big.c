/* As mv.c for 256 KiB .. 256 MiB (microseconds): copy into a fresh
 * (never touched) destination, copy into a resident one, UFFDIO_MOVE into an
 * empty one, MADV_DONTNEED + UFFDIO_MOVE, mremap + refill, and faulting the
 * source back in. ./big THREADS MAX_MIB   gcc -O2 -o big big.c -lpthread */
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
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static volatile int stop; static void*spin(void*a){ while(!stop) __asm__ volatile("pause"); return 0;}
static void touch(char*p,size_t n){for(size_t i=0;i<n;i+=4096)p[i]=1;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int threads=argc>1?atoi(argv[1]):0; size_t maxn=(argc>2?atol(argv[2]):64)<<20;
  pthread_t th; if(threads)pthread_create(&th,0,spin,0);
  size_t R=1ul<<40;
  char*base=mmap(0,R,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  int uffd=syscall(SYS_userfaultfd, O_CLOEXEC|O_NONBLOCK|UFFD_USER_MODE_ONLY);
  struct uffdio_api api={.api=UFFD_API,.features=1ull<<16}; ioctl(uffd,UFFDIO_API,&api);
  struct uffdio_register reg={.range={.start=(uint64_t)base,.len=R/2},.mode=UFFDIO_REGISTER_MODE_WP};
  if(ioctl(uffd,UFFDIO_REGISTER,&reg))perror("reg");
  char*A=base, *B=base+(1ul<<36), *C=base+(R/2), *D=C+(1ul<<36);
  printf("threads=%d\n%8s %10s %10s %10s %10s %10s %10s\n",threads,"KiB","cp->fresh","cp->resid","uffd->empty","dn+uffd","mremap+mm","refault");
  for(size_t n=256<<10;n<=maxn;n*=2){
    int reps = n<=(4<<20)?31:(n<=(32<<20)?9:5); double t[6][64];
    for(int r=0;r<reps;r++){
      touch(A,n); madvise(B,n,MADV_DONTNEED);
      double t0=now(); memcpy(B,A,n); t[0][r]=now()-t0;
      t0=now(); memcpy(B,A,n); t[1][r]=now()-t0;
      madvise(B,n,MADV_DONTNEED);
      struct uffdio_move_ mv={.dst=(uint64_t)B,.src=(uint64_t)A,.len=n,.mode=2};
      t0=now(); if(ioctl(uffd,UFFDIO_MOVE_,&mv)){perror("move");return 1;} t[2][r]=now()-t0;
      touch(A,n); touch(B,n); mv.move=0;
      t0=now(); madvise(B,n,MADV_DONTNEED); if(ioctl(uffd,UFFDIO_MOVE_,&mv)){perror("move2");return 1;} t[3][r]=now()-t0;
      touch(C,n); touch(D,n);
      t0=now(); if(mremap(C,n,n,MREMAP_MAYMOVE|MREMAP_FIXED,D)==MAP_FAILED)perror("mremap");
      if(mmap(C,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_FIXED,-1,0)==MAP_FAILED)perror("mmap"); t[4][r]=now()-t0;
      munmap(D,n); mmap(D,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_FIXED,-1,0);
      madvise(A,n,MADV_DONTNEED); t0=now(); touch(A,n); t[5][r]=now()-t0;
    }
    printf("%8zu",n>>10); for(int k=0;k<6;k++){qsort(t[k],reps,sizeof(double),cmp);printf(" %10.0f",t[k][reps/2]/1000);} printf("  (us)\n");
  }
  stop=1; return 0;
}
