"""Bytes copied per op of bench's vec-grow (sizes as devutils' log_size(8,
1 MiB), Vec doubling from 8 bytes, 1 op = alloc or realloc) for growers
ladders given as size classes. python3 copy_volume.py"""
import random, math
def grower(sc, lad):
    for g in lad:
        if g >= sc: return g
    return sc
def sim(lad, n=200000, seed=1):
    rnd=random.Random(seed)
    ops=0; copied=0; moves={}
    while ops<n:
        bits=rnd.randint(3,20); lo=max(1<<bits,8); hi=min((1<<bits)*2-1,1<<20)
        target=rnd.randint(lo,hi)
        cap=8; slot=3; ops+=1  # alloc(8) -> sc 3
        while cap<target and ops<n:
            new=cap*2; nsc=new.bit_length()-1
            if nsc>slot:
                g=grower(nsc,lad); copied+=cap; moves[cap]=moves.get(cap,0)+1; slot=g
            cap=new; ops+=1
    return copied/ops, {k:v/ops for k,v in sorted(moves.items())}
for name,lad in [("current",[6,7,12,14,16,18,21]),("no256K",[6,7,12,14,16,21]),("no64K,256K",[6,7,12,14,21]),("4K->2M",[6,7,12,21]),("16K,128K,2M",[6,7,12,14,17,21]),("16K,64K,512K",[6,7,12,14,16,19,21]), ("..,64K,1M",[6,7,12,14,16,20,21])]:
    c,m=sim(lad)
    print(f"{name:14s} copy B/op {c:8.0f}  moves/op {sum(m.values()):.3f}  by cap: "+" ".join(f"{k//1024 if k>=1024 else k}{'K' if k>=1024 else 'B'}:{v:.3f}" for k,v in m.items()))
print()
for name,lad in [("4K,64K,2M",[6,7,12,16,21]),("4K,32K,2M",[6,7,12,15,21]),("16K,2M",[6,7,12,14,21]),("8K,2M",[6,7,12,13,21]),("4K,2M",[6,7,12,21]),("16K,256K,4M",[6,7,12,14,18,22]),("64,4K,128K,4M",[6,12,17,22])]:
    c,m=sim(lad)
    print(f"{name:14s} copy B/op {c:8.0f}  est ns {35+c*0.044:5.0f}")
