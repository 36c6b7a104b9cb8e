#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""forge_config.py — a hostile registry's image for the tests: an image of
a registry on 127.0.0.1 served again under a new tag with its config's
diff_ids replaced (the layers, their annotations and the TOCs untouched).

  forge_config.py HOST:PORT REPO FROM_TAG TO_TAG DIFF_ID...
      uploads the forged config to REPO, puts the manifest as REPO:TO_TAG
"""
import hashlib, json, sys, urllib.request

MT = "application/vnd.oci.image.manifest.v1+json"

def req(method, url, data=None, headers=None):
    r = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    return urllib.request.urlopen(r, timeout=30)

def main():
    host, repo, src, dst = sys.argv[1:5]
    diff_ids = sys.argv[5:]
    base = f"http://{host}/v2/{repo}"
    m = json.load(req("GET", f"{base}/manifests/{src}", headers={"Accept": MT}))
    cfg = json.load(req("GET", f"{base}/blobs/{m['config']['digest']}"))
    cfg["rootfs"]["diff_ids"] = diff_ids
    body = json.dumps(cfg).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    loc = req("POST", f"{base}/blobs/uploads/").headers["Location"]
    if loc.startswith("/"):
        loc = f"http://{host}{loc}"
    req("PUT", f"{loc}{'&' if '?' in loc else '?'}digest={digest}", body,
        {"Content-Type": "application/octet-stream"})
    m["config"]["digest"], m["config"]["size"] = digest, len(body)
    req("PUT", f"{base}/manifests/{dst}", json.dumps(m).encode(), {"Content-Type": m.get("mediaType", MT)})
    print(digest[7:])

main()
