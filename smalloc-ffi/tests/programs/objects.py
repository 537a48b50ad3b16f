"""Builds and sorts a few million Python objects and round-trips them
through json; prints checksums (the test compares them with and without
smalloc preloaded). OBJECTS_ROWS scales it (600000 rows by default)."""
import hashlib
import json
import os
import random

rng = random.Random(20240601)
N = int(os.environ.get("OBJECTS_ROWS", 600_000))

# 600k tuples, each with an int, a float and a fresh string: 2.4M objects.
rows = [(rng.randrange(1 << 40), rng.random(), "k%07d" % rng.randrange(N)) for _ in range(N)]
rows.sort()
h = hashlib.sha256()
for r in rows[:: N // 1000]:
    h.update(repr(r).encode())
print("sorted", len(rows), h.hexdigest())

# 150k dicts with nested lists, through json and back.
docs = [{"id": i, "name": rows[i][2], "tags": [rows[i][0] % 97, i % 13], "v": rows[i][1]}
        for i in range(N // 4)]
text = json.dumps(docs, sort_keys=True)
back = json.loads(text)
assert back == docs
back.sort(key=lambda d: (d["tags"][0], d["name"], d["id"]))
print("json", len(text), hashlib.sha256(json.dumps(back[:5000]).encode()).hexdigest())

# A dict and a set of strings, grown and shrunk.
d = {r[2]: r[0] for r in rows}
s = set(d)
for k in sorted(s)[::2]:
    del d[k]
print("dict", len(d), sum(d.values()) % 1000003)
