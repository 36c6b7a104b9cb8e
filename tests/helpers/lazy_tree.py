#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""lazy_tree.py DIR SEED — the tree the lazy pull tests push as one
zstd:chunked layer (test_pull_lazy.sh, test_lazy_complete.sh): 40 random
files of 3 to 150 kB in DIR/usr/lib/data (drawn from SEED), a symlink, a
hardlink, an empty file and a setuid file."""
import os
import random
import sys

t, seed = sys.argv[1], int(sys.argv[2])
rnd = random.Random(seed)
os.makedirs(f"{t}/usr/lib/data", exist_ok=True)
for i in range(40):
    data = rnd.randbytes(rnd.choice((3000, 20000, 70000, 150000)))
    open(f"{t}/usr/lib/data/f{i:02d}", "wb").write(data)
os.symlink("data/f01", f"{t}/usr/lib/link")
os.link(f"{t}/usr/lib/data/f02", f"{t}/usr/lib/hard")
open(f"{t}/empty", "wb").close()
os.chmod(f"{t}/usr/lib/data/f03", 0o4755)
