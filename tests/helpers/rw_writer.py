#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""rw_writer.py — one writer of test_mount_restart_rw.sh: changes its own
directory of a --rw mount (creates, appends, fsyncs, renames, mkdirs,
unlinks, writes through fds held open all along, lists through a directory
fd held open) until STOP exists (at most MAX operations), and keeps a
manifest of what the tree must hold.

    rw_writer.py DIR STOP MANIFEST ERRORS SEED
    rw_writer.py --check DIR MANIFEST

--check compares the tree under DIR with MANIFEST's and exits non-zero,
naming a few differing entries, when they differ.

Every operation that fails is a line in ERRORS (the test wants none).
MANIFEST, written at the end, is JSON: {relative path: md5 of the content,
or "dir"}; the held files are in it too. Everything is fsynced, so the
manifest is what must survive a server kill.
"""
import errno
import hashlib
import json
import os
import random
import sys

MAX = 100000


def main():
    top, stop, manifest_path, errors_path, seed = sys.argv[1:6]
    rnd = random.Random(int(seed))
    errors = open(errors_path, "a")
    want = {}  # relative path -> bytes, or None for a directory
    ops = 0

    def err(what, e):
        errors.write("%s: %s: %s\n" % (top, what, e))
        errors.flush()

    os.mkdir(top)
    want_dirs = {""}
    held = os.open(os.path.join(top, "held"), os.O_RDWR | os.O_CREAT, 0o644)
    held_app = os.open(os.path.join(top, "held.append"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    held_dir = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    want["held"] = b""
    want["held.append"] = b""
    n = 0
    while ops < MAX and not os.path.exists(stop):
        ops += 1
        n += 1
        op = rnd.randrange(9)
        files = sorted(k for k, v in want.items() if v is not None and not k.startswith("held"))
        dirs = sorted(want_dirs)
        try:
            if op == 0 or not files:  # create, write, fsync
                name = os.path.join(rnd.choice(dirs), "f%d" % n).lstrip("/")
                data = os.urandom(rnd.randrange(1, 20000))
                fd = os.open(os.path.join(top, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
                want[name] = data
            elif op == 1:  # append, fsync
                name = rnd.choice(files)
                data = os.urandom(rnd.randrange(1, 5000))
                fd = os.open(os.path.join(top, name), os.O_WRONLY | os.O_APPEND)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
                want[name] += data
            elif op == 2:  # rename
                name = rnd.choice(files)
                new = os.path.join(rnd.choice(dirs), "r%d" % n).lstrip("/")
                os.rename(os.path.join(top, name), os.path.join(top, new))
                want[new] = want.pop(name)
            elif op == 3:  # mkdir
                name = os.path.join(rnd.choice(dirs), "d%d" % n).lstrip("/")
                os.mkdir(os.path.join(top, name))
                want_dirs.add(name)
            elif op == 4 and len(files) > 3:  # unlink
                name = rnd.choice(files)
                os.unlink(os.path.join(top, name))
                del want[name]
            elif op == 5:  # through the fd held open since the start
                data = os.urandom(rnd.randrange(1, 3000))
                os.write(held, data)
                os.fsync(held)
                want["held"] += data
                data = os.urandom(rnd.randrange(1, 3000))
                os.write(held_app, data)
                os.fsync(held_app)
                want["held.append"] += data
            elif op == 6:  # read back
                name = rnd.choice(files)
                with open(os.path.join(top, name), "rb") as f:
                    got = f.read()
                if got != want[name]:
                    err("read back %s" % name, "%d bytes, want %d" % (len(got), len(want[name])))
            elif op == 7:  # list through the directory fd held open
                names = set(os.listdir(held_dir))
                if "held" not in names:
                    err("listdir (held fd)", "no 'held' in %d names" % len(names))
            else:  # rmdir of an empty directory
                empty = [d for d in dirs if d and not any(
                    k.startswith(d + "/") for k in list(want) + list(want_dirs))]
                if empty:
                    d = rnd.choice(empty)
                    os.rmdir(os.path.join(top, d))
                    want_dirs.discard(d)
        except OSError as e:
            err("op %d" % op, "%s (%s)" % (e, errno.errorcode.get(e.errno, "?")))
            if e.errno == errno.ENOTCONN:
                break
    # The held fds still work after every kill: a last write, read back.
    try:
        os.write(held, b"end")
        os.fsync(held)
        want["held"] += b"end"
        os.lseek(held, 0, os.SEEK_SET)
        got = b""
        while True:
            chunk = os.read(held, 1 << 20)
            if not chunk:
                break
            got += chunk
        if got != want["held"]:
            err("held read back", "%d bytes, want %d" % (len(got), len(want["held"])))
        os.close(held)
        os.close(held_app)
        os.close(held_dir)
    except OSError as e:
        err("held fds", e)
    out = {k: hashlib.md5(v).hexdigest() for k, v in want.items() if v is not None}
    out.update({d: "dir" for d in want_dirs if d})
    with open(manifest_path, "w") as f:
        json.dump({"ops": ops, "tree": out}, f)


def check(top, manifest_path):
    want = json.load(open(manifest_path))["tree"]
    got = {}
    for dirpath, dirnames, filenames in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        for d in dirnames:
            got[os.path.normpath(os.path.join(rel, d))] = "dir"
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as fh:
                got[os.path.normpath(os.path.join(rel, f))] = hashlib.md5(fh.read()).hexdigest()
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))
        sys.exit("%s: %d entries differ from the manifest, e.g. %s" % (top, len(diff), diff[:6]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        check(*sys.argv[2:4])
    else:
        main()
