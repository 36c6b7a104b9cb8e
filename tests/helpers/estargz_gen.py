#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""estargz_gen.py — writes an eStargz layer blob from a directory tree, for
the tests (Debian packages the Go library, 0.12, and no command; this
follows the format as containerd/stargz-snapshotter documents it, and
test_estargz_interop.sh has that library read what it writes).

  estargz_gen.py OUT DIR [--chunk-size N] [--prefetch PATH,...] [--no-prefetch]
                 [--inner]
      prints {"size", "digest", "diff_id", "toc_digest"} as JSON

The blob is a gzip-compressed tar that any gunzip | tar reads: each tar
header goes into the current gzip member; each regular file's data starts
a new member (a file larger than the chunk size is cut in chunks, each its
own member), whose offset the TOC records. After the files, one member
holds a tar of "stargz.index.json" (the TOC: {"version": 1, "entries":
[...]}, as eStargz writes it) and the tar's end, then the 51-byte footer:
an empty gzip member whose extra field (subfield 'S','G') is "%016x" of
the TOC member's offset followed by "STARGZ".
--prefetch puts the named files first, then a ".prefetch.landmark" (one
byte, 0xf); --no-prefetch writes ".no.prefetch.landmark" first.
--inner packs regular files of at most 64 bytes into the member of the
file before them (their "innerOffset" tells where), as eStargz's
minimised chunks do.
"""
import argparse, base64, hashlib, io, json, os, stat, sys, tarfile, zlib

LANDMARK = b"\x0f"


class Writer:
    def __init__(self, f):
        self.f = f
        self.off = 0  # compressed bytes written
        self.z = None
        self.diff = hashlib.sha256()
        self.inner = 0  # uncompressed bytes in the current member
        self.member_off = 0  # where the current member starts
        self.has_data = False  # a file's data started the current member

    def new_member(self):
        self.close_member()
        self.z = zlib.compressobj(6, zlib.DEFLATED, 31)
        self.inner = 0
        self.member_off = self.off
        self.has_data = False
        return self.off

    def close_member(self):
        if self.z:
            self.out(self.z.flush())
            self.z = None

    def out(self, b):
        self.f.write(b)
        self.off += len(b)

    def write(self, data):
        if not self.z:
            self.new_member()
        self.diff.update(data)
        self.inner += len(data)
        self.out(self.z.compress(data))


def rfc3339(t):
    import datetime
    return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def walk(root):
    """The tree's paths, parents first, in a stable order."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(d, root)
        if rel != ".":
            out.append(rel)
        for f in sorted(files):
            out.append(os.path.normpath(os.path.join(rel, f)))
        for s in dirs:  # symlinks to directories are not walked into
            p = os.path.join(d, s)
            if os.path.islink(p):
                out.append(os.path.normpath(os.path.join(rel, s)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("dir")
    ap.add_argument("--chunk-size", type=int, default=4 << 20)
    ap.add_argument("--prefetch", default="")
    ap.add_argument("--no-prefetch", action="store_true")
    ap.add_argument("--inner", action="store_true")
    a = ap.parse_args()

    paths = walk(a.dir)
    pre = [p for p in a.prefetch.split(",") if p]
    if pre:
        paths = pre + [".prefetch.landmark"] + [p for p in paths if p not in pre]
    elif a.no_prefetch:
        paths = [".no.prefetch.landmark"] + paths

    entries = []
    inodes = {}
    with open(a.out, "wb") as f:
        w = Writer(f)
        w.new_member()
        for rel in paths:
            full = os.path.join(a.dir, rel)
            if rel.endswith("landmark") and not os.path.lexists(full):
                ti = tarfile.TarInfo(rel)
                ti.size, ti.mode, ti.mtime = 1, 0o644, 0
                data = LANDMARK
            else:
                st = os.lstat(full)
                ti = tarfile.TarInfo(rel + ("/" if stat.S_ISDIR(st.st_mode) else ""))
                ti.mode, ti.uid, ti.gid, ti.mtime = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)
                data = None
                key = (st.st_dev, st.st_ino)
                if stat.S_ISDIR(st.st_mode):
                    ti.type = tarfile.DIRTYPE
                elif stat.S_ISLNK(st.st_mode):
                    ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink(full)
                elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and key in inodes:
                    ti.type, ti.linkname = tarfile.LNKTYPE, inodes[key]
                elif stat.S_ISREG(st.st_mode):
                    inodes[key] = rel
                    with open(full, "rb") as g:
                        data = g.read()
                    ti.size = len(data)
                elif stat.S_ISFIFO(st.st_mode):
                    ti.type = tarfile.FIFOTYPE
                elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                    ti.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
                    ti.devmajor, ti.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
                else:
                    continue
                xattrs = {}
                try:
                    for n in os.listxattr(full, follow_symlinks=False):
                        xattrs[n] = os.getxattr(full, n, follow_symlinks=False)
                except OSError:
                    pass
                if xattrs:
                    ti.pax_headers = {"SCHILY.xattr." + k: v.decode("latin-1") for k, v in xattrs.items()}
            e = {"name": ti.name, "type": {tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink",
                 tarfile.LNKTYPE: "hardlink", tarfile.FIFOTYPE: "fifo", tarfile.CHRTYPE: "char",
                 tarfile.BLKTYPE: "block"}.get(ti.type, "reg"),
                 "modtime": rfc3339(ti.mtime), "mode": ti.mode}
            if ti.uid:
                e["uid"] = ti.uid
            if ti.gid:
                e["gid"] = ti.gid
            if ti.linkname:
                e["linkName"] = ti.linkname
            if ti.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                e["devMajor"], e["devMinor"] = ti.devmajor, ti.devminor
            if ti.pax_headers:
                e["xattrs"] = {k[len("SCHILY.xattr."):]: base64.b64encode(v.encode("latin-1")).decode()
                               for k, v in ti.pax_headers.items()}
            w.write(ti.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape"))
            if data is None or len(data) == 0:
                if e["type"] == "reg":
                    e["size"] = 0
                entries.append(e)
                continue
            e["size"] = len(data)
            e["digest"] = "sha256:" + hashlib.sha256(data).hexdigest()
            pos = 0
            first = True
            while pos < len(data):
                piece = data[pos:pos + a.chunk_size]
                c = e if first else {"name": ti.name, "type": "chunk"}
                if a.inner and len(data) <= 64 and w.has_data:
                    c["offset"] = w.member_off
                    c["innerOffset"] = w.inner
                else:
                    c["offset"] = w.new_member()
                    w.has_data = True
                if not first:
                    c["chunkOffset"] = pos
                if len(data) > a.chunk_size:
                    c["chunkSize"] = len(piece)
                c["chunkDigest"] = "sha256:" + hashlib.sha256(piece).hexdigest()
                w.write(piece)
                if not first:
                    entries.append(c)
                else:
                    entries.append(e)
                first = False
                pos += len(piece)
            pad = (-len(data)) % 512
            if pad:
                w.write(b"\0" * pad)
        # the TOC: a tar of one entry in its own member, with the tar's end
        toc = json.dumps({"version": 1, "entries": entries}, indent="\t").encode()
        toc_off = w.new_member()
        ti = tarfile.TarInfo("stargz.index.json")
        ti.size = len(toc)
        tb = ti.tobuf(format=tarfile.GNU_FORMAT) + toc + b"\0" * ((-len(toc)) % 512) + b"\0" * 1024
        w.write(tb)
        w.close_member()
        # the footer: gzip header with FEXTRA, XLEN 26, 'S' 'G' 22, payload,
        # an empty final stored block, CRC32 0 and ISIZE 0
        extra = b"SG" + (22).to_bytes(2, "little") + b"%016xSTARGZ" % toc_off
        footer = (b"\x1f\x8b\x08\x04\0\0\0\0\0\xff" + len(extra).to_bytes(2, "little") + extra
                  + b"\x01\x00\x00\xff\xff" + b"\0" * 8)
        assert len(footer) == 51
        w.out(footer)
    blob = open(a.out, "rb").read()
    json.dump({"size": len(blob), "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
               "diff_id": "sha256:" + w.diff.hexdigest(),
               "toc_digest": "sha256:" + hashlib.sha256(toc).hexdigest()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
