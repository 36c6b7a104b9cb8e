#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""oci_image.py — builds test images for the pull tests, by the OCI image spec.

  oci_image.py layer OUT.tar SEED [NFILES [SIZE]]
      a deterministic layer tar: NFILES files under d-SEED/ with content
      derived from SEED (a shared SEED gives an identical layer)
  oci_image.py add DIR REF OS/ARCH LAYER.tar:COMP...
      adds an image (config, manifest) to the OCI layout DIR under REF;
      COMP is raw, gzip or zstd; prints the manifest digest. LAYER.zst:zstd-file
      is a layer already compressed with zstd, stored as it is (its diff_id
      streamed through zstd -d: it may hold GiBs)
  oci_image.py index DIR REF MANIFEST_DIGEST...
      adds an image index of those manifests (platforms from their configs)
  oci_image.py docker-archive OUT.tar NAME:TAG LAYER.tar...
      a `docker save` style archive of one image (uncompressed layers)
  oci_image.py config-digest DIR REF
      prints the image id (config digest hex) of REF's linux/amd64 image

  $OCI_IMAGE_CONFIG, a JSON object, is merged into the image config that
  add writes (its "config" key into the config's "config": Entrypoint,
  User...; others, such as "history", at the top).
"""
import gzip, hashlib, io, json, os, subprocess, sys, tarfile

def sha(b):
    return hashlib.sha256(b).hexdigest()

def put_blob(d, data):
    h = sha(data)
    os.makedirs(f"{d}/blobs/sha256", exist_ok=True)
    with open(f"{d}/blobs/sha256/{h}", "wb") as f:
        f.write(data)
    return "sha256:" + h

def read_blob(d, digest):
    with open(f"{d}/blobs/sha256/{digest[7:]}", "rb") as f:
        return f.read()

def load_index(d):
    try:
        with open(f"{d}/index.json") as f:
            return json.load(f)
    except FileNotFoundError:
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/oci-layout", "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        return {"schemaVersion": 2, "manifests": []}

def save_index(d, idx, desc, ref):
    desc = dict(desc, annotations={"org.opencontainers.image.ref.name": ref})
    idx["manifests"] = [m for m in idx["manifests"]
                        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != ref]
    idx["manifests"].append(desc)
    with open(f"{d}/index.json", "w") as f:
        json.dump(idx, f)

def layer(out, seed, nfiles=3, size=1000):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        di = tarfile.TarInfo(f"d-{seed}")
        di.type, di.mode, di.mtime = tarfile.DIRTYPE, 0o755, 1700000000
        t.addfile(di)
        for i in range(int(nfiles)):
            data = hashlib.sha256(f"{seed}/{i}".encode()).digest() * (int(size) // 32 + 1)
            data = data[: int(size)]
            ti = tarfile.TarInfo(f"d-{seed}/f{i}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
            t.addfile(ti, io.BytesIO(data))
    with open(out, "wb") as f:
        f.write(buf.getvalue())

def compress(raw, comp):
    if comp == "raw":
        return raw, "application/vnd.oci.image.layer.v1.tar"
    if comp == "gzip":
        return gzip.compress(raw, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip"
    if comp == "zstd":
        z = subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True)
        return z.stdout, "application/vnd.oci.image.layer.v1.tar+zstd"
    sys.exit(f"unknown compression {comp}")

def config_for(platform, diff_ids):
    parts = platform.split("/")
    cfg = {"architecture": parts[1], "os": parts[0],
           "config": {"Env": ["PATH=/usr/bin:/bin"]},
           "rootfs": {"type": "layers", "diff_ids": diff_ids},
           "history": [{"created_by": "oci_image.py"} for _ in diff_ids]}
    if len(parts) > 2:
        cfg["variant"] = parts[2]
    extra = json.loads(os.environ.get("OCI_IMAGE_CONFIG", "{}"))
    cfg["config"].update(extra.pop("config", {}))
    cfg.update(extra)
    return json.dumps(cfg, sort_keys=True).encode()

def add(d, ref, platform, specs):
    idx = load_index(d)
    layers, diff_ids = [], []
    for spec in specs:
        path, comp = spec.rsplit(":", 1)
        if comp == "zstd-file":
            data, h = open(path, "rb").read(), hashlib.sha256()
            with subprocess.Popen(["zstd", "-dcq", path], stdout=subprocess.PIPE) as z:
                for chunk in iter(lambda: z.stdout.read(1 << 20), b""):
                    h.update(chunk)
            if z.returncode != 0:
                sys.exit(f"{path}: not a zstd stream")
            layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                           "digest": put_blob(d, data), "size": len(data)})
            diff_ids.append("sha256:" + h.hexdigest())
            continue
        raw = open(path, "rb").read()
        data, mt = compress(raw, comp)
        layers.append({"mediaType": mt, "digest": put_blob(d, data), "size": len(data)})
        diff_ids.append("sha256:" + sha(raw))
    cfg = config_for(platform, diff_ids)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": put_blob(d, cfg), "size": len(cfg)},
        "layers": layers}).encode()
    publish(d, idx, ref, "application/vnd.oci.image.manifest.v1+json", manifest)

def publish(d, idx, ref, media_type, body):
    """Stores a manifest or index blob, lists it in index.json under ref and
    prints its digest."""
    desc = {"mediaType": media_type, "digest": put_blob(d, body), "size": len(body)}
    save_index(d, idx, desc, ref)
    print(desc["digest"])

def index(d, ref, digests):
    idx = load_index(d)
    entries = []
    for dg in digests:
        m = read_blob(d, dg)
        cfg = json.loads(read_blob(d, json.loads(m)["config"]["digest"]))
        plat = {"architecture": cfg["architecture"], "os": cfg["os"]}
        if "variant" in cfg:
            plat["variant"] = cfg["variant"]
        entries.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": dg, "size": len(m), "platform": plat})
    body = json.dumps({"schemaVersion": 2,
                       "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": entries}).encode()
    publish(d, idx, ref, "application/vnd.oci.image.index.v1+json", body)

def docker_archive(out, tag, paths):
    raws = [open(p, "rb").read() for p in paths]
    cfg = config_for("linux/amd64", ["sha256:" + sha(r) for r in raws])
    with tarfile.open(out, "w") as t:
        def put(name, data):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), 1700000000
            t.addfile(ti, io.BytesIO(data))
        names = []
        for r in raws:
            names.append(f"{sha(r)}/layer.tar")
            put(names[-1], r)
        put(f"{sha(cfg)}.json", cfg)
        put("manifest.json", json.dumps(
            [{"Config": f"{sha(cfg)}.json", "RepoTags": [tag], "Layers": names}]).encode())

def config_digest(d, ref):
    idx = load_index(d)
    desc = [m for m in idx["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref][0]
    doc = json.loads(read_blob(d, desc["digest"]))
    if "manifests" in doc:
        doc = json.loads(read_blob(d, [m for m in doc["manifests"]
                                       if m["platform"]["os"] == "linux"
                                       and m["platform"]["architecture"] == "amd64"][0]["digest"]))
    print(doc["config"]["digest"][7:])

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "layer":
        layer(*args)
    elif cmd == "add":
        add(args[0], args[1], args[2], args[3:])
    elif cmd == "index":
        index(args[0], args[1], args[2:])
    elif cmd == "docker-archive":
        docker_archive(args[0], args[1], args[2:])
    elif cmd == "config-digest":
        config_digest(args[0], args[1])
    else:
        sys.exit(__doc__)
