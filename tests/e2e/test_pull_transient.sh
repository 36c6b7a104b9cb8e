#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_transient.sh — transient HTTP failures on the way from a real
# registry (docker-registry on 127.0.0.1) are retried; permanent ones are
# not; an oversized blob is cut off. Faults come from fault_proxy.py, a
# small proxy in front of the registry that answers the first N requests
# of each blob/manifest URL with a fault, then forwards, and counts the
# requests per path:
#   503, dropped connections (no reply), retried; the pull succeeds; one
#   half a body then a closed connection log line per retry, no more
#   429 with Retry-After: 1              retried after at least 1 s each
#   404, 401, 401 after answering a      not retried: the proxy sees the
#   Basic challenge                      path once (twice with the challenge)
#   a blob longer than its descriptor    exit 5, the proxy sees the client
#                                        stop reading, nothing committed
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

setup $OCI_IMAGE layer base.tar base 10 4000
setup $OCI_IMAGE layer mid.tar mid 4 30000
mkdir -p "$T/rnd/rnd" && head -c $((1 << 20)) /dev/urandom >"$T/rnd/rnd/blob"
setup mktar "$T/rnd" "$T/top.tar"
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip mid.tar:zstd top.tar:raw >/dev/null
app_id=$($OCI_IMAGE config-digest oci app)
top_diff=sha256:$(sha256sum "$T/top.tar" | cut -c1-64)
setup registry_start "$T/reg"
setup registry_push "$T/oci" app team/app:1
# The digests as the registry has them (skopeo compresses the raw layer).
curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://$REGISTRY/v2/team/app/manifests/1" >"$T/manifest.json"
read -r mid_blob top_blob < <(jq -r '[.layers[1].digest, .layers[2].digest] | join(" ")' "$T/manifest.json")
[[ -n $top_blob ]] || { fail "no manifest from the registry"; finish; exit 1; }

python3 "$HELPERS/fault_proxy.py" "$T/proxy.port" "$REGISTRY_PORT" 2>"$T/proxy.log" &
proxy_pid=$!
on_exit "kill $proxy_pid; wait $proxy_pid"
setup wait_for 10 test -s "$T/proxy.port"
PROXY=127.0.0.1:$(cat "$T/proxy.port")
setup wait_http "http://$PROXY/_proxy/healthz" 200 10
src="docker://$PROXY/team/app:1"

# proxy_set QUERY: the next faults (and fresh counters).
proxy_set() { curl -sf "http://$PROXY/_proxy/set?$1" >/dev/null || fail "proxy_set $1"; }
counts() { curl -sf "http://$PROXY/_proxy/counts"; }
path_count() { counts | jq --arg p "$1" '.paths[$p] // 0'; }

# pull CASE ARGS...: a pull through the proxy into a fresh store $T/st-CASE,
# its stdin $PULL_STDIN (the password a --creds USER reads, or nothing);
# exit code in $code, output in $T/CASE.out/.err, milliseconds in $ms.
pull() {
  local c=$1
  shift
  local start
  start=$(date +%s%N)
  code=0
  cairn --store "$T/st-$c" pull --insecure "$@" >"$T/$c.out" 2>"$T/$c.err" \
    <<<"${PULL_STDIN:-}" || code=$?
  ms=$((($(date +%s%N) - start) / 1000000))
}

# transient CASE QUERY: with these faults the pull still succeeds; every
# retry is one line, there is no other chatter, and no URL is tried more
# often than the attempts allow (6 by default).
transient() {
  local c=$1 faults retries lines max
  proxy_set "$2"
  pull "$c" "$src"
  if [[ $code != 0 || $(cat "$T/$c.out") != "$app_id" ]]; then
    fail "$c: pull through faults: exit $code: $(cat "$T/$c.err")"; return 1
  fi
  faults=$(counts | jq .faults)
  retries=$(grep -c "; retry [0-9]*/5 in" "$T/$c.err")
  lines=$(grep -v '^cairn: created store' "$T/$c.err" | grep -c .)
  max=$(counts | jq '[.paths[]] | max')
  if ((faults < 1 || retries != faults || lines != retries + 3 || max > 6)); then
    fail "$c: $faults faults, $retries retry lines, $lines lines, at most $max requests per path: $(cat "$T/$c.err")"
    return 1
  fi
  ok "$c: pull succeeds through $faults injected faults, one log line each (${ms} ms)"
}

# 503 twice on every blob and manifest URL: 5 paths (manifest, config, 3 layers).
transient 503 "mode=503&n=2"
[[ $(counts | jq '[.paths[] | select(. == 3)] | length') == 5 ]] ||
  fail "503: expected 5 paths asked 3 times each: $(counts)"
# The connection closed without a reply, twice on every URL.
transient drop "mode=drop&n=2"
grep -q "Empty reply\|Server returned nothing\|Recv failure" "$T/drop.err" ||
  fail "drop: the reason is not named: $(cat "$T/drop.err")"
# Half of every blob, then the connection closes: the retry starts over.
transient half "mode=half&n=1&match=/blobs/"
grep -q "Transferred a partial file\|end of response" "$T/half.err" ||
  fail "half: the reason is not named: $(cat "$T/half.err")"
# 429 with Retry-After: 1, twice on the manifest: at least 2 s of waiting.
transient 429 "mode=429&n=2&retry_after=1&match=/manifests/"
((ms >= 2000)) || fail "429: the pull took $ms ms; Retry-After: 1 twice means at least 2000"
[[ $(grep -c "HTTP 429.*retry [12]/5 in 1.0s" "$T/429.err") == 2 ]] ||
  fail "429: retries do not wait Retry-After: $(cat "$T/429.err")"

# permanent CASE QUERY PATH WANT_EXIT WANT_REQUESTS ARGS...: the pull fails at
# once with one error line, and the proxy saw PATH WANT_REQUESTS times.
permanent() {
  local c=$1 q=$2 path=$3 want=$4 reqs=$5 n
  shift 5
  proxy_set "$q"
  pull "$c" "$@" "$src"
  n=$(path_count "$path")
  if [[ $code != "$want" || $n != "$reqs" ]] || grep -q "retry" "$T/$c.err" ||
    [[ $(grep -c "^cairn: pull" "$T/$c.err") != 1 ]]; then
    fail "$c: exit $code (want $want), $n requests of $path (want $reqs): $(cat "$T/$c.err")"
    return 1
  fi
  [[ $(cairn --store "$T/st-$c" images --json | jq length) == 0 ]] || fail "$c: an image was committed"
  ok "$c: not retried (exit $code, $n request(s))"
}
blob=/v2/team/app/blobs/$mid_blob
permanent 404-manifest "mode=404&n=100&match=/manifests/" /v2/team/app/manifests/1 3 1
permanent 404-blob "mode=404&n=100&match=$mid_blob" "$blob" 3 1 --jobs 1
grep -q "$mid_blob" "$T/404-blob.err" || fail "404: the blob is not named: $(cat "$T/404-blob.err")"
permanent 401 "mode=401&n=100&match=$mid_blob" "$blob" 1 1
# A Basic challenge is answered once with the credentials; a 401 after that is final.
PULL_STDIN=p permanent 401-after-auth "mode=401b&n=100&match=$mid_blob" "$blob" 1 2 --creds u
grep -q "authentication refused" "$T/401-after-auth.err" ||
  fail "401 after auth: $(cat "$T/401-after-auth.err")"

# A blob served with 64 MiB more than its descriptor: cut off, exit 5,
# nothing of it committed.
proxy_set "mode=more&n=100&match=$top_blob"
pull more --jobs 1 "$src"
[[ $code == 5 ]] || fail "more: exit $code, want 5: $(cat "$T/more.err")"
grep -q "$top_blob" "$T/more.err" && grep -q "cut off" "$T/more.err" ||
  fail "more: the blob is not named as cut off: $(cat "$T/more.err")"
cut_seen() { [[ $(counts | jq .cut) -ge 1 ]]; }
wait_for 10 cut_seen || fail "more: the proxy did not see the client stop reading: $(counts)"
[[ $(path_count "/v2/team/app/blobs/$top_blob") == 1 ]] || fail "more: an oversized blob was retried: $(counts)"
[[ $(cairn --store "$T/st-more" images --json | jq length) == 0 ]] || fail "more: an image was committed"
cairn --store "$T/st-more" layers --json | jq -e --arg d "$top_diff" 'map(.id) | index($d) == null' \
  >/dev/null || fail "more: the oversized layer was committed"
expect_exit 0 "more: fsck clean after the cut-off" cairn --store "$T/st-more" fsck
# The same store, the proxy healed: the pull now succeeds.
proxy_set "mode=none"
pull more "$src"
[[ $code == 0 && $(cat "$T/more.out") == "$app_id" ]] || fail "more: healed pull: exit $code: $(cat "$T/more.err")"
ok "more: an oversized blob is cut off (exit 5); nothing committed; the healed pull succeeds"
finish
