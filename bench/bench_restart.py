#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench_restart.py — what a restart of cairnfs's server costs readers.

    python3 bench/bench_restart.py BUILD_DIR [KILLS] [MOUNTS] [GAP] [rw]

Imports an image of 4 files of 8 MiB into a temporary store, mounts it,
and runs 4 reader threads that each pread 4 KiB with O_DIRECT (every read
is a FUSE request) in a loop, timestamping each read. The server (the
supervisor's child) is killed with SIGKILL KILLS times (default 20), GAP
seconds apart (4th argument, default 1.2). Prints, over all kills: the
time from the kill until every reader has completed a read (kill to
serving again), and the longest gap any reader saw between two reads
(its stall). Then mounts the image MOUNTS
times (default 10) and prints the supervisors' and the servers' PSS
(/proc/PID/smaps_rollup). Everything it starts is stopped at the end.
With "rw" (5th argument) the mount is writable (--rw) and the threads are
writers: each pwrites 4 KiB with O_DIRECT (every write a FUSE request) to
a file of its own made in the mount, in the same loop.
Run under `flock /work/bench.lock`; other work on the machine shows.
"""
import json, mmap, os, signal, subprocess, sys, tempfile, threading, time

build = os.path.abspath(sys.argv[1])
kills = int(sys.argv[2]) if len(sys.argv) > 2 else 20
n_mounts = int(sys.argv[3]) if len(sys.argv) > 3 else 10
gap = float(sys.argv[4]) if len(sys.argv) > 4 else 1.2
rw = len(sys.argv) > 5 and sys.argv[5] == "rw"
tmp = tempfile.mkdtemp(prefix="cairn-bench-restart.")
store = os.path.join(tmp, "store")
cairn = [os.path.join(build, "cairn"), "--store", store]


def run(*args, **kw):
    return subprocess.run(cairn + list(args), check=True, capture_output=True, text=True, **kw).stdout


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def pss_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


mounts = []
try:
    src = os.path.join(tmp, "src")
    os.mkdir(src)
    for i in range(4):
        with open(os.path.join(src, f"f{i}"), "wb") as f:
            f.write(os.urandom(8 << 20))
    subprocess.run(["tar", "-C", src, "-cf", os.path.join(tmp, "data.tar"), "."], check=True)
    run("import", "data:1", os.path.join(tmp, "data.tar"))
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    run("mount", "-q", *(["--rw"] if rw else []), "data:1", mnt)
    mounts.append(mnt)
    sup = json.loads(run("mounts", "--json"))[0]["pid"]

    stop = threading.Event()
    stamps = [[] for _ in range(4)]
    errors = []

    def reader(i):
        if rw:
            fd = os.open(os.path.join(mnt, f"w{i}"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
        else:
            fd = os.open(os.path.join(mnt, f"f{i}"), os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 4096)
        buf.write(os.urandom(4096))
        off = 0
        while not stop.is_set():
            try:
                if rw:
                    os.pwritev(fd, [buf], off)
                else:
                    os.preadv(fd, [buf], off)
            except OSError as e:
                errors.append(e)
            stamps[i].append(time.monotonic())
            off = (off + 4096) % (8 << 20)
        os.close(fd)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    kill_times = []
    for k in range(kills):
        server = children(sup)
        while not server:
            time.sleep(0.001)
            server = children(sup)
        t = time.monotonic()
        os.kill(server[0], signal.SIGKILL)
        kill_times.append(t)
        time.sleep(gap)
    stop.set()
    for t in threads:
        t.join()
    all_stamps = sorted(s for r in stamps for s in r)
    to_serving = []  # per kill: until every reader has read again
    for t in kill_times:
        waits = [next((s for s in r if s > t), None) for r in stamps]
        if all(w is not None for w in waits):
            to_serving.append((max(waits) - t) * 1000)
    stall = max(max(b - a for a, b in zip(r, r[1:])) for r in stamps) * 1000
    # the gaps that span a kill: the stalls restarts caused
    kill_stall = max(b - a for r in stamps for a, b in zip(r, r[1:])
                     if any(a <= t < b for t in kill_times)) * 1000
    normal = sorted(b - a for r in stamps for a, b in zip(r, r[1:]))
    print(f"{'writes' if rw else 'reads'}: {len(all_stamps)}, errors: {len(errors)}, kills: {kills}")
    print(f"kill to serving (every reader has read again), ms: "
          f"median {sorted(to_serving)[len(to_serving) // 2]:.1f}, max {max(to_serving):.1f}")
    print(f"longest reader stall spanning a kill, ms: {kill_stall:.1f}; longest of all, ms: {stall:.1f} "
          f"(median gap between reads without kills: {normal[len(normal) // 2] * 1000:.3f})")

    for m in range(1, n_mounts):
        d = os.path.join(tmp, f"m{m}")
        os.mkdir(d)
        run("mount", "-q", "data:1", d)
        mounts.append(d)
    recs = json.loads(run("mounts", "--json"))
    sups = [r["pid"] for r in recs]
    servers = [c for p in sups for c in children(p)]
    sp = [pss_kib(p) for p in sups]
    vp = [pss_kib(p) for p in servers]
    print(f"{len(sups)} mounts: supervisor PSS KiB mean {sum(sp) / len(sp):.0f} "
          f"(min {min(sp)}, max {max(sp)}); server PSS KiB mean {sum(vp) / len(vp):.0f}")
finally:
    for m in mounts:
        subprocess.run(cairn + ["umount", "-q", m], capture_output=True)
    subprocess.run(["rm", "-rf", tmp])
