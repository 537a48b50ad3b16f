/* VMA count after moving the pages of a 256 KiB "slot" into a 2 MiB "slot"
 * of one big MAP_NORESERVE reservation, 2000 times.
 *   ./vma MODE ITERS   MODE 0: memcpy; 1: mremap(MAYMOVE|FIXED) + mmap(FIXED)
 *   refill of the hole; 2: mremap(MAYMOVE|FIXED|DONTUNMAP); +10: only 4
 *   distinct slot pairs (reused), else a new pair each time.
 * gcc -O2 -o vma vma.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <time.h>
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
static int vmas(void){FILE*f=fopen("/proc/self/maps","r");int n=0,c;while((c=fgetc(f))!=EOF)if(c=='\n')n++;fclose(f);return n;}
static void dump(char*lo,char*hi){FILE*f=fopen("/proc/self/maps","r");char line[512];while(fgets(line,512,f)){unsigned long a,b;sscanf(line,"%lx-%lx",&a,&b);if(a<(unsigned long)hi&&b>(unsigned long)lo)printf("  %s",line);}fclose(f);}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); int iters=atoi(argv[2]);
  size_t R=1ul<<36;
  char*base=mmap(0,R,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  char*srcr=base+(1ul<<34), *dstr=base+(2ul<<34);
  size_t S=256<<10, D=2<<20;
  printf("start vmas=%d\n",vmas());
  for(int i=0;i<iters;i++){
    int slot = (mode>=10)? (i%4) : i;  /* mode>=10: few slots reused */
    char*s=srcr+(size_t)slot*S; char*d=dstr+(size_t)slot*D;
    memset(s,1,S); d[0]=2; d[D-1]=3;
    if(mode%10==0){ memcpy(d,s,S);}
    else if(mode%10==1){ void*r=mremap(s,S,S,MREMAP_MAYMOVE|MREMAP_FIXED,d); if(r==MAP_FAILED){perror("mremap");return 1;}
      void*h=mmap(s,S,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_FIXED,-1,0); if(h==MAP_FAILED){perror("mmap");return 1;} }
    else if(mode%10==2){ void*r=mremap(s,S,S,MREMAP_MAYMOVE|MREMAP_FIXED|MREMAP_DONTUNMAP,d); if(r==MAP_FAILED){perror("mremap dontunmap");return 1;} }
    if(d[1]!=1){printf("bad\n");return 1;}
    if(i<3||i==iters-1){printf("iter %d vmas=%d\n",i,vmas()); if(i<2) dump(base,base+R);}
  }
  return 0;
}
