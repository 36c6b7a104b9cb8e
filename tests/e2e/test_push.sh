#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_push.sh — cairn push to a real docker-registry on 127.0.0.1 and to
# an OCI layout: pull → push to another repository → pull into a fresh
# store gives the same image id and the same tree (cairn export), for
# plain layers and for gzip layers pushed again as gzip (and zstd, none);
# skopeo inspects and copies what cairn pushed, from the registry and from
# an oci: layout; a second push skips every blob; a missing image exits 3,
# an import from before tar records is refused, and a push holds its pins
# (cairn rm during a push that a slow registry holds up exits 4) and
# retries a transient failure (a 503 on its first upload session) and
# sends a blob again in a new session when its transfer was cut; TLS
# with --cert-dir and token auth (push scope, cross-repository mounts).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 20 4000
setup $OCI_IMAGE layer mid.tar mid 5 100000
setup $OCI_IMAGE layer top.tar top 3 500
setup $OCI_IMAGE add oci gz linux/amd64 base.tar:gzip mid.tar:gzip top.tar:gzip >/dev/null
setup $OCI_IMAGE add oci raw linux/amd64 base.tar:raw mid.tar:raw top.tar:raw >/dev/null
gz_id=$($OCI_IMAGE config-digest oci gz)
raw_id=$($OCI_IMAGE config-digest oci raw)
setup registry_start "$T/reg"
setup registry_push "$T/oci" gz team/gz:1
setup registry_push "$T/oci" raw team/raw:1
R=$REGISTRY

# export_sum STORE IMAGE: the sha256 of the image's exported tree.
export_sum() { cairn --store "$1" export -q "$2" | sha256sum | cut -d' ' -f1; }

# round_trip KIND REPO COMPRESS: pull REPO, push it to REPO-copy with
# --compress COMPRESS, pull that into a fresh store: same id, same tree.
round_trip() {
  local kind=$1 repo=$2 comp=$3 id=$4 fresh=$T/st-$1-$3
  expect_exit 0 "$kind: pull" cairn pull -q --insecure "docker://$R/$repo:1"
  [[ $(cat "$T/stdout") == "$id" ]] || fail "$kind: pull gave $(cat "$T/stdout"), not $id"
  expect_exit 0 "$kind: push --compress $comp" cairn push --insecure \
    --compress "$comp" "$R/$repo:1" "docker://$R/$repo-$comp:2"
  grep -q '^sha256:[0-9a-f]\{64\}$' "$T/stdout" || fail "$kind: push printed $(cat "$T/stdout")"
  local digest
  digest=$(cat "$T/stdout")
  grep -q sent "$T/stderr" || fail "$kind: no progress lines: $(cat "$T/stderr")"
  expect_exit 0 "$kind/$comp: pull back into a fresh store" cairn --store "$fresh" pull -q \
    --insecure "docker://$R/$repo-$comp:2"
  [[ $(cat "$T/stdout") == "$id" ]] && ok "$kind/$comp: same image id" ||
    fail "$kind/$comp: pulled back $(cat "$T/stdout"), pushed $id"
  local a b
  a=$(export_sum "$ST" "$id")
  b=$(export_sum "$fresh" "$id")
  [[ $a == "$b" && $a != "$(sha256sum </dev/null | cut -d' ' -f1)" ]] &&
    ok "$kind/$comp: same tree (cairn export)" || fail "$kind/$comp: the trees differ"
  check "$kind/$comp: skopeo inspect" skopeo inspect -n --tls-verify=false \
    "docker://$R/$repo-$comp:2" >/dev/null
  [[ $(skopeo inspect -n --tls-verify=false "docker://$R/$repo-$comp:2" | jq -r .Digest) == "$digest" ]] ||
    fail "$kind/$comp: the registry's digest is not the one push printed"
  check "$kind/$comp: skopeo copy" skopeo copy -q --src-tls-verify=false \
    "docker://$R/$repo-$comp:2" "oci:$T/skopeo-$kind-$comp:x"
}
round_trip raw team/raw none "$raw_id"
round_trip gzip team/gz gzip "$gz_id"
round_trip zstd team/gz zstd "$gz_id"

# Pushing again: the registry has every blob.
expect_exit 0 "second push" cairn push --insecure "$gz_id" "docker://$R/team/gz-gzip:3"
[[ $(grep -c 'skipped' "$T/stderr") == 3 ]] || fail "second push did not skip: $(cat "$T/stderr")"
# gzip output is deterministic: the same manifest as the first push.
[[ $(skopeo inspect -n --tls-verify=false "docker://$R/team/gz-gzip:3" | jq -r .Digest) == \
  $(skopeo inspect -n --tls-verify=false "docker://$R/team/gz-gzip:2" | jq -r .Digest) ]] &&
  ok "same manifest digest for the same push" || fail "the second push's manifest differs"

# oci:DIR[:TAG], then skopeo copy from it, then a cairn pull of it.
expect_exit 0 "push to oci:" cairn push -q "$gz_id" "oci:$T/layout:v1"
jq -e '.manifests[0].annotations["org.opencontainers.image.ref.name"] == "v1"' \
  "$T/layout/index.json" >/dev/null && ok "oci: index.json has the ref.name" ||
  fail "oci: index.json: $(cat "$T/layout/index.json")"
check "skopeo copy oci:DIR" skopeo copy -q --dest-tls-verify=false "oci:$T/layout:v1" \
  "docker://$R/team/from-layout:1"
expect_exit 0 "pull what skopeo copied from the layout" cairn --store "$T/st-layout" pull -q \
  --insecure "docker://$R/team/from-layout:1"
[[ $(cat "$T/stdout") == "$gz_id" ]] && ok "layout round trip: same id" ||
  fail "layout round trip gave $(cat "$T/stdout")"
expect_exit 0 "pull oci: of what cairn wrote" cairn --store "$T/st-layout2" pull -q "oci:$T/layout:v1"
[[ $(cat "$T/stdout") == "$gz_id" ]] || fail "oci: pull gave $(cat "$T/stdout")"

# Failures: no such image (3), a bad DEST (2), an unreachable registry.
expect_exit 3 "push of a missing image" cairn push --insecure nothing:1 "docker://$R/x:1"
[[ $(grep -c . "$T/stderr") == 1 ]] || fail "not-found error is not one line: $(cat "$T/stderr")"
expect_exit 2 "push to a bad DEST" cairn push "$gz_id" "ftp://x/y"
expect_exit 2 "push --compress xz" cairn push --compress xz "$gz_id" "oci:$T/l2"

# A layer stored before tar records were kept: refused, clearly, until it
# is imported again.
two_layers
expect_exit 0 "import" cairn --store "$T/st-old" import -q old:1 "$T/1.tar" "$T/2.tar"
sqlite3 "$T/st-old/meta.db" "DELETE FROM layer_tars"
expect_exit 1 "push of a layer without its tar record" cairn --store "$T/st-old" push old:1 "oci:$T/old"
grep -q "without its tar headers" "$T/stderr" || fail "refusal not explained: $(cat "$T/stderr")"
expect_exit 0 "import again" cairn --store "$T/st-old" import -q old2:1 "$T/1.tar" "$T/2.tar"
expect_exit 0 "push after the import again" cairn --store "$T/st-old" push old:1 "oci:$T/old"

# TLS: an unknown CA is refused; --cert-dir with it pushes over HTTPS.
setup registry_start "$T/reg-tls" "" tls
mkdir "$T/certs" && cp "$T/reg-tls/certs/ca.crt" "$T/certs/test-ca.crt"
expect_exit 1 "tls: an unknown CA is refused" cairn push "$gz_id" \
  "docker://$REGISTRY/team/tls:1"
expect_exit 0 "tls: push with --cert-dir" cairn push --cert-dir "$T/certs" \
  "$gz_id" "docker://$REGISTRY/team/tls:1"
expect_exit 0 "tls: pull it back" cairn --store "$T/st-tls" pull -q --cert-dir "$T/certs" \
  "docker://$REGISTRY/team/tls:1"
[[ $(cat "$T/stdout") == "$gz_id" ]] || fail "tls: pulled back $(cat "$T/stdout")"

# Token auth: the token is asked with push scope; the cross-repository
# mount is tried from the repository the image was pulled from.
setup registry_start "$T/reg-token" "" token
export REGISTRY_AUTH_FILE=$T/none.json
expect_exit 0 "token: pull" cairn --store "$T/st-token" pull -q --insecure --creds alice:secret \
  "oci:$T/oci:gz"
expect_exit 1 "token: push without credentials is refused" cairn --store "$T/st-token" push \
  --insecure "$gz_id" "docker://$REGISTRY/team/tok:1"
expect_exit 0 "token: push with --creds" cairn --store "$T/st-token" push --insecure \
  --creds alice:secret "$gz_id" "docker://$REGISTRY/team/tok:1"
expect_exit 0 "token: push with --creds USER, the password on stdin" sh -c "echo secret |
  cairn --store '$T/st-token' push --insecure --creds alice '$gz_id' 'docker://$REGISTRY/team/tok3:1'"
expect_exit 0 "token: pull back" cairn --store "$T/st-token" pull --insecure --creds alice:secret \
  "docker://$REGISTRY/team/tok:1" tok:2
[[ $(cat "$T/stdout") == "$gz_id" ]] || fail "token: pulled back $(cat "$T/stdout")"
cairn --store "$T/st-token" rm -q tok:2
expect_exit 0 "token: pull by the registry's name" cairn --store "$T/st-token" pull -q \
  --insecure --creds alice:secret "docker://$REGISTRY/team/tok:1"
expect_exit 0 "token: push to another repository mounts" cairn --store "$T/st-token" push \
  --insecure --creds alice:secret "$REGISTRY/team/tok:1" "docker://$REGISTRY/team/tok2:1"
[[ $(grep -c skipped "$T/stderr") == 3 ]] && ok "token: every layer mounted or skipped" ||
  fail "token: layers sent again: $(cat "$T/stderr")"
unset REGISTRY_AUTH_FILE

# A push holds its pins: a registry that takes its time on the upload
# keeps the push going while cairn rm is refused (exit 4).
cat >"$T/slow_registry.py" <<'PY'
import http.server, socket, sys, time
posts = 0
broken = set()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_HEAD(self):
        self.send_response(404 if "/blobs/" in self.path else 200); self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def do_POST(self):
        global posts
        posts += 1
        if posts == 1:  # the first upload session: a transient failure, retried
            self.send_response(503); self.send_header("Retry-After", "0"); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(202); self.send_header("Location", "/upload/%d" % posts); self.send_header("Content-Length", "0"); self.end_headers()
    def do_PUT(self):
        n = int(self.headers.get("Content-Length", "0"))
        session = self.path.split("?")[0]
        if session == "/upload/2" and not broken:  # the connection cut midway
            broken.add(session); self.rfile.read(min(n, 4096))
            self.close_connection = True; self.connection.shutdown(socket.SHUT_RDWR); return
        if session in broken:  # part of the body is in: the digest cannot match
            self.rfile.read(n); body = b'{"errors":[{"code":"DIGEST_INVALID","message":"digest did not match"}]}'
            self.send_response(400); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body); return
        while n > 0:
            k = len(self.rfile.read(min(n, 16384))); n -= k; time.sleep(0.1)
            if k == 0: break
        self.send_response(201); self.send_header("Content-Length", "0"); self.end_headers()
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
python3 "$T/slow_registry.py" "$T/slow.port" &
slow=$!
on_exit "kill $slow"
wait_for 5 test -s "$T/slow.port" || fail "slow registry did not start"
cairn push --insecure --compress none "$gz_id" \
  "docker://127.0.0.1:$(cat "$T/slow.port")/slow/app:1" >/dev/null 2>"$T/push.err" &
pusher=$!
on_exit "kill $pusher"
wait_for 10 sh -c "cairn-pin --store '$ST' ls | grep -q push" || fail "the push took no pin"
expect_exit 4 "rm during a push" cairn rm "$gz_id"
grep -q "pinned by.*push" "$T/stderr" || fail "rm does not name the push: $(cat "$T/stderr")"
# The push goes on to the end: the 503 on its first POST was retried.
wait "$pusher"
rc=$?
[[ $rc == 0 ]] && ok "the slowed push finished after a retried 503" || fail "slowed push exit $rc"
grep -q "POST .*HTTP 503.*retry 1/" "$T/push.err" || fail "the 503 was not retried: $(cat "$T/push.err")"
grep -q "new upload session (1/2)" "$T/push.err" ||
  fail "a session whose transfer was cut was not replaced: $(cat "$T/push.err")"
expect_exit 0 "rm once the push is gone" cairn rm -q "$R/team/gz:1"
finish
