/* A vector doubled from 2 MiB to 1 GiB, each step into a fresh (never
 * touched) slot of its size, the old slot freed (>=128 MiB: pages
 * released, as smalloc's free does): copy (smalloc today) vs UFFDIO_MOVE of
 * the old slot's pages into the new slot. The vector's new half is written
 * after each step (as pushes would). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <linux/userfaultfd.h>
#include <unistd.h>
#include <stdint.h>
#include <time.h>
#include <fcntl.h>
#include <sys/resource.h>
struct uffdio_move_ { uint64_t dst, src, len, mode; int64_t move; };
#define UFFDIO_MOVE_ _IOWR(0xAA, 0x05, struct uffdio_move_)
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); size_t top=(size_t)atol(argv[2])<<20;
  size_t R=1ul<<42;
  char*base=mmap(0,R,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  base=(char*)(((uintptr_t)base+(1ul<<40)-1)&~((1ul<<40)-1));
  int uffd=-1;
  if(mode==1){ uffd=syscall(SYS_userfaultfd,O_CLOEXEC|O_NONBLOCK|UFFD_USER_MODE_ONLY);
    struct uffdio_api api={.api=UFFD_API,.features=1ull<<16}; if(ioctl(uffd,UFFDIO_API,&api))perror("api");
    struct uffdio_register reg={.range={.start=(uint64_t)base,.len=1ul<<40},.mode=UFFDIO_REGISTER_MODE_WP}; if(ioctl(uffd,UFFDIO_REGISTER,&reg))perror("reg"); }
  double t0=now(), tmove=0;
  size_t n=2<<20; int sc=21; char*p=base+((size_t)sc<<34); memset(p,1,n);
  while(n<top){
    char*q=base+((size_t)(sc+1)<<34);
    double t1=now();
    if(mode==0) memcpy(q,p,n);
    else { struct uffdio_move_ mv={.dst=(uint64_t)q,.src=(uint64_t)p,.len=n,.mode=2}; if(ioctl(uffd,UFFDIO_MOVE_,&mv)){perror("move");return 1;} }
    tmove+=now()-t1;
    if(n>=(128u<<20)) madvise(p+4096,n-4096,MADV_DONTNEED); /* smalloc releases freed slots >= 128 MiB */
    memset(q+n,2,n); /* the pushes that fill the new half */
    p=q; n*=2; sc++;
  }
  struct rusage ru; getrusage(RUSAGE_SELF,&ru);
  printf("%s: total %.3f s, of which copy/move %.3f s; peak RSS %ld MiB, minor faults %ld\n",mode?"uffd move":"copy     ",now()-t0,tmove,ru.ru_maxrss/1024,ru.ru_minflt);
}
