#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""start_image.py — the files the start benchmarks add to Debian's minbase.

    python3 bench/start_image.py ROOT EXTRA SIZE_MIB BIG_MIB READ_PCT [--big]

ROOT is the minbase tree; EXTRA gets data/bigNNN (random bytes, BIG_MIB
each, up to SIZE_MIB of image in all), bench/read.list (READ_PCT% of the
image's bytes: the first big file, then Debian files of 16 KiB or more
under /usr drawn with a fixed seed) and bench/start.sh (cats them, prints
"started"). EXTRA/../read.info gets "FILES BYTES" read; with --big also
bench/big, a file the command does not read, and read.info adds the
number of big files and its size. Used by bench_lazy_start.sh and
bench_containerd.sh.
"""
import os, random, sys

want_big = sys.argv[6:] == ["--big"]
root, extra, size_mib, big_mib, pct = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
files, deb = [], 0
for d, dirs, names in os.walk(root):
    dirs.sort()
    for n in sorted(names):
        p = os.path.join(d, n)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        s = os.path.getsize(p)
        deb += s
        rel = "/" + os.path.relpath(p, root)
        if s >= 16384 and rel.startswith("/usr/") and " " not in rel:
            files.append((rel, s))
total = size_mib << 20
target = total * pct // 100
big, nbig = big_mib << 20, 0
left = total - deb
with open("/dev/urandom", "rb") as rnd_src:
    while left > 0:
        n = min(big, left)
        with open(f"{extra}/data/big{nbig:03d}", "wb") as f:
            while n > 0:
                k = min(n, 1 << 20)
                f.write(rnd_src.read(k))
                n -= k
        left -= big
        nbig += 1
read, got = [], 0
if nbig and big <= target:
    read.append("/data/big000")
    got = min(big, total - deb)
rnd = random.Random(33)
rnd.shuffle(files)
for rel, s in files:
    if got >= target:
        break
    read.append(rel)
    got += s
open(f"{extra}/bench/read.list", "w").write("\n".join(read) + "\n")
with open(f"{extra}/bench/start.sh", "w") as f:
    f.write("#!/bin/sh\ncat $(cat /bench/read.list) >/dev/null && echo started\n")
os.chmod(f"{extra}/bench/start.sh", 0o755)
if not want_big:
    print(f"{len(read)} {got}", file=open(f"{extra}/../read.info", "w"))
    sys.exit(0)
# READS' big file: one the command does not read (the largest Debian
# file without random ones: SIZE_MIB under the tree's size)
big_rel = f"/data/big{nbig - 1:03d}" if nbig > 1 else max(
    (f for f in files if f[0] not in read), key=lambda f: f[1])[0]
open(f"{extra}/bench/big", "w").write(big_rel + "\n")
big_size = big if nbig > 1 else dict(files)[big_rel]
print(f"{len(read)} {got} {nbig} {big_size}", file=open(f"{extra}/../read.info", "w"))
