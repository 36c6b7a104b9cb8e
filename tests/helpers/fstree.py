#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fstree.py — the independent side of cairnfs's full-tree comparisons.

  fstree.py make-layers OUTDIR     write layer1..3.tar exercising every OCI
                                   merge rule and entry type tar can carry
  fstree.py expect LAYER.tar...    the merged tree the layers define (OCI
                                   image-spec rules applied here, in Python,
                                   not by cairn), as a canonical listing
  fstree.py scan DIR               the same listing of a real directory tree

A listing has one line per path, sorted: path, type, permission bits, owner,
mtime in ns, then size and sha256 (files), target (symlinks), major:minor
(devices), nlink, xattrs, and for non-directories the first path sharing
its inode (hardlink groups). `diff` of two listings is the comparison.
"""
import hashlib
import io
import os
import stat
import struct
import sys
import tarfile

# ---------------------------------------------------------------- listings


def fmt_xattrs(xattrs):
    return ",".join(f"{k}={v.hex()}" for k, v in sorted(xattrs.items())) or "-"


def line(path, kind, perm, uid, gid, mtime_ns, detail, nlink, xattrs, group):
    return "\t".join([path, kind, f"{perm:04o}", f"{uid}:{gid}", str(mtime_ns), detail,
                      str(nlink), fmt_xattrs(xattrs), group])


def scan(root):
    rows, first_name = [], {}
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in dirnames + filenames:
            paths.append(os.path.join(dirpath, name))
    paths.append(root)
    infos = []
    for p in paths:
        rel = os.path.relpath(p, root)
        st = os.lstat(p)
        infos.append((rel, p, st))
        if not stat.S_ISDIR(st.st_mode):
            k = st.st_ino
            if k not in first_name or rel < first_name[k]:
                first_name[k] = rel
    for rel, p, st in infos:
        m = st.st_mode
        if stat.S_ISREG(m):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            kind, detail = "reg", f"{st.st_size}:{h.hexdigest()}"
        elif stat.S_ISDIR(m):
            kind, detail = "dir", "-"
        elif stat.S_ISLNK(m):
            kind, detail = "lnk", os.readlink(p)
        elif stat.S_ISCHR(m) or stat.S_ISBLK(m):
            kind = "chr" if stat.S_ISCHR(m) else "blk"
            detail = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        elif stat.S_ISFIFO(m):
            kind, detail = "fifo", "-"
        else:
            kind, detail = "sock", "-"
        xattrs = {}
        for name in os.listxattr(p, follow_symlinks=False):
            xattrs[name] = os.getxattr(p, name, follow_symlinks=False)
        group = "-" if kind == "dir" else first_name[st.st_ino]
        rows.append(line(rel, kind, stat.S_IMODE(m), st.st_uid, st.st_gid, st.st_mtime_ns,
                         detail, st.st_nlink, xattrs, group))
    return sorted(rows)


# ------------------------------------------------------------ OCI merging


class Inode:
    def __init__(self, kind, ti=None, data=b""):
        self.kind = kind
        if ti is None:  # a synthesized parent directory
            self.perm, self.uid, self.gid, self.mtime_ns, self.xattrs = 0o755, 0, 0, 0, {}
            self.detail = "-"
            return
        self.perm, self.uid, self.gid = ti.mode & 0o7777, ti.uid, ti.gid
        self.mtime_ns = mtime_ns(ti)
        self.xattrs = {k[len("SCHILY.xattr."):]: v.encode("utf-8", "surrogateescape")
                       for k, v in ti.pax_headers.items() if k.startswith("SCHILY.xattr.")}
        if kind == "reg":
            self.detail = f"{len(data)}:{hashlib.sha256(data).hexdigest()}"
        elif kind == "lnk":
            self.detail = ti.linkname
        elif kind in ("chr", "blk"):
            self.detail = f"{ti.devmajor}:{ti.devminor}"
        else:
            self.detail = "-"


def mtime_ns(ti):
    raw = ti.pax_headers.get("mtime")
    if raw is None:
        return int(ti.mtime) * 10**9
    sec, _, frac = raw.partition(".")
    return int(sec) * 10**9 + int((frac + "000000000")[:9])


def norm(name):
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts)


def remove_subtree(tree, path):
    tree.pop(path, None)
    prefix = path + "/" if path else ""
    for k in [k for k in tree if k.startswith(prefix) and k != ""]:
        del tree[k]


def ensure_parents(tree, path):
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        p = "/".join(parts[:i])
        if p not in tree or tree[p].kind != "dir":
            remove_subtree(tree, p)
            tree[p] = Inode("dir")


def apply_layer(tree, tarpath):
    with tarfile.open(tarpath) as tf:
        members = tf.getmembers()
        # Whiteouts act on lower layers only, so they go first.
        for ti in members:
            path = norm(ti.name)
            base = path.rsplit("/", 1)[-1]
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            if base == ".wh..wh..opq":
                if parent in tree and tree[parent].kind == "dir":
                    prefix = parent + "/" if parent else ""
                    for k in [k for k in tree if k.startswith(prefix) and k != parent and k]:
                        del tree[k]
            elif base.startswith(".wh."):
                target = (parent + "/" if parent else "") + base[4:]
                if target in tree:
                    remove_subtree(tree, target)
        for ti in members:
            path = norm(ti.name)
            base = path.rsplit("/", 1)[-1]
            if base.startswith(".wh."):
                continue
            if ti.islnk():
                node = tree[norm(ti.linkname)]
            elif ti.isdir():
                node = Inode("dir", ti)
            elif ti.issym():
                node = Inode("lnk", ti)
            elif ti.ischr():
                node = Inode("chr", ti)
            elif ti.isblk():
                node = Inode("blk", ti)
            elif ti.isfifo():
                node = Inode("fifo", ti)
            else:
                node = Inode("reg", ti, tf.extractfile(ti).read())
            if path:
                ensure_parents(tree, path)
            old = tree.get(path)
            if old is not None and not (old.kind == "dir" and node.kind == "dir"):
                remove_subtree(tree, path)
            tree[path] = node


def expect(tars):
    tree = {"": Inode("dir")}
    for t in tars:
        apply_layer(tree, t)
    names = {}
    for p, node in tree.items():
        names.setdefault(id(node), []).append(p)
    rows = []
    for p, node in tree.items():
        if node.kind == "dir":
            prefix = p + "/" if p else ""
            nlink = 2 + sum(1 for k, n in tree.items()
                            if n.kind == "dir" and k.startswith(prefix) and k != p
                            and "/" not in k[len(prefix):])
            group = "-"
        else:
            nlink = len(names[id(node)])
            group = min(names[id(node)])
        rows.append(line(p or ".", node.kind, node.perm, node.uid, node.gid, node.mtime_ns,
                         node.detail, nlink, node.xattrs, group))
    return sorted(rows)


# ---------------------------------------------------------- test layers

CAP_NET_BIND = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)  # +ep


class Layer:
    def __init__(self, path):
        self.tf = tarfile.open(path, "w", format=tarfile.PAX_FORMAT)
        self.meta = {}

    def add(self, name, kind="reg", data=b"", mode=None, uid=None, gid=None, mtime=None,
            target="", dev=(0, 0), xattrs=None):
        # A hard link's header carries its target's mode, owner and time, as
        # every tar writer (GNU tar, Go's archive/tar) gives the one inode's:
        # containerd's applier sets the shared inode's from the link's header.
        meta = self.meta.get(target, (None, 0, 0, 1600000000)) if kind == "hard" else \
            (None, 0, 0, 1600000000)
        mode = meta[0] if mode is None else mode
        uid, gid = meta[1] if uid is None else uid, meta[2] if gid is None else gid
        mtime = meta[3] if mtime is None else mtime
        ti = tarfile.TarInfo(name)
        ti.type = {"reg": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "lnk": tarfile.SYMTYPE,
                   "hard": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE,
                   "fifo": tarfile.FIFOTYPE}[kind]
        if mode is None:
            mode = 0o755 if kind == "dir" else 0o644
        ti.mode, ti.uid, ti.gid, ti.mtime = mode, uid, gid, mtime
        if kind != "hard":
            self.meta[name] = (mode, uid, gid, mtime)
        ti.uname = ti.gname = ""
        ti.linkname = target
        ti.devmajor, ti.devminor = dev
        if xattrs:
            ti.pax_headers = {"SCHILY.xattr." + k: v.decode("utf-8", "surrogateescape")
                              for k, v in xattrs.items()}
        if kind == "reg":
            ti.size = len(data)
            self.tf.addfile(ti, io.BytesIO(data))
        else:
            self.tf.addfile(ti)

    def close(self):
        self.tf.close()


def make_layers(out):
    os.makedirs(out, exist_ok=True)
    big = bytes((i * 7919) & 0xFF for i in range(3 << 20))
    l1 = Layer(os.path.join(out, "layer1.tar"))
    l1.add("./", "dir", mode=0o755, mtime=1500000000)
    l1.add("etc/", "dir", mode=0o755)
    l1.add("etc/os-release", data=b"PRETTY_NAME=\"cairn test\"\nID=cairntest\n")
    l1.add("etc/config", data=b"version 1\n", mtime=1600000000.25)
    l1.add("bin/", "dir", mode=0o755)
    l1.add("bin/suid", data=b"#!/bin/sh\n", mode=0o4755, xattrs={"security.capability": CAP_NET_BIND})
    l1.add("bin/sgid", data=b"sgid\n", mode=0o2755, gid=50)
    l1.add("tmp/", "dir", mode=0o1777, mtime=1600000004.5)
    l1.add("usr/", "dir")
    l1.add("usr/lib/", "dir")
    l1.add("usr/lib/a.so", data=b"\x7fELF" + bytes(range(256)) * 4, mtime=1600000001.5)
    l1.add("usr/lib/link.so", "lnk", target="a.so", mode=0o777)
    l1.add("usr/lib/gone.so", data=b"gone\n")
    l1.add("usr/abs", "lnk", target="/etc/passwd", mode=0o777, mtime=1600000003.75)
    l1.add("usr/dangling", "lnk", target="../does/not/exist", mode=0o777)
    l1.add("hard/", "dir")
    l1.add("hard/orig", data=b"shared by four names\n", uid=1000, gid=1000)
    l1.add("hard/link1", "hard", target="hard/orig")
    l1.add("hard/zz/", "dir")
    l1.add("hard/zz/link2", "hard", target="hard/orig")
    l1.add("hard/a_link", "hard", target="hard/orig")
    l1.add("hard2/", "dir")
    l1.add("hard2/a", data=b"pair\n")
    l1.add("hard2/b", "hard", target="hard2/a")
    l1.add("dev/", "dir")
    l1.add("dev/null", "chr", mode=0o666, dev=(1, 3))
    l1.add("dev/loop0", "blk", mode=0o660, gid=6, dev=(7, 0))
    l1.add("dev/fifo", "fifo", mode=0o640)
    l1.add("empty.txt", data=b"")
    l1.add("big.bin", data=big, mtime=1600000002.125)
    l1.add("removeme/", "dir")
    l1.add("removeme/sub/", "dir")
    l1.add("removeme/sub/deep.txt", data=b"deep\n")
    l1.add("opq/", "dir", mode=0o755)
    l1.add("opq/old1", data=b"old\n")
    l1.add("opq/olddir/", "dir")
    l1.add("opq/olddir/x", data=b"x\n")
    l1.add("dir2file/", "dir")
    l1.add("dir2file/child", data=b"child\n")
    l1.add("file2dir", data=b"was a file\n")
    l1.add("samelayer/", "dir")
    l1.add("samelayer/lower", data=b"lower\n")
    l1.add("data/", "dir", uid=65534, gid=65534, mode=0o700)
    l1.add("data/x", data=b"xattrs\n", xattrs={"user.test": b"hello", "user.bin": b"\x00\x01\xff"})
    l1.add("implicit/a/b.txt", data=b"parents synthesized\n")
    l1.add("owner", data=b"owned\n", uid=1234, gid=5678, mode=0o600)
    l1.close()

    l2 = Layer(os.path.join(out, "layer2.tar"))
    l2.add("etc/", "dir", mode=0o750, mtime=1700000000.75)
    l2.add("etc/config", data=b"version 2, longer\n", mode=0o600, uid=1000)
    l2.add(".wh.removeme", mode=0)
    l2.add("opq/", "dir", mode=0o711)
    l2.add("opq/.wh..wh..opq", mode=0)
    l2.add("opq/new1", data=b"new\n")
    l2.add("dir2file", data=b"now a file\n")
    l2.add("file2dir/", "dir", mode=0o755)
    l2.add("file2dir/child", data=b"child of new dir\n")
    l2.add("usr/lib/.wh.gone.so", mode=0)
    l2.add("hard2/b", data=b"no longer a link\n")
    l2.add(".wh.samelayer", mode=0)
    l2.add("samelayer", data=b"same-layer whiteout keeps this\n")
    l2.add(".wh.nothing-here", mode=0)
    l2.close()

    l3 = Layer(os.path.join(out, "layer3.tar"))
    l3.add("removeme/", "dir", mode=0o755)
    l3.add("removeme/new.txt", data=b"re-added\n")
    l3.add("fresh/.wh..wh..opq", mode=0)
    l3.add("fresh/f", data=b"fresh\n")
    l3.add("bin/sgid", "lnk", target="suid", mode=0o777)
    l3.add("hard/.wh.link1", mode=0)
    l3.add("usr/lib/a.so", data=b"upgraded\n", mtime=1700000001.5)
    l3.close()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make-layers":
        make_layers(args[0])
    elif cmd == "expect":
        print("\n".join(expect(args)))
    elif cmd == "scan":
        print("\n".join(scan(args[0])))
    else:
        sys.exit(f"fstree.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
