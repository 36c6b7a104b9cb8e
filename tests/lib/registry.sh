# SPDX-License-Identifier: Apache-2.0
# registry.sh — test-lib.sh's helpers for a real docker-registry on
# 127.0.0.1 (`use_lib registry`; bench/bench_pull.sh sources it alone).
# It sets nothing up until asked. Every process it starts is
# recorded and stopped by registry_cleanup (tests call it from their trap).
#
#   registry_start DIR [PORT] [token]  start one (storage in DIR/data); sets
#                                       REGISTRY_PORT, REGISTRY (127.0.0.1:PORT);
#                                       "token" adds token auth served by
#                                       token_server.py (user alice, password secret;
#                                       bob, hunter2, for bob/ only);
#                                       "tls" serves HTTPS with a certificate for
#                                       127.0.0.1 from a test CA in DIR/certs (ca.crt)
#   registry_stop                       stop it (the data stays for a restart)
#   registry_push OCIDIR REF REPO:TAG [skopeo flags]  fill it with skopeo
#   registry_blob_path DIGEST           the file that holds a blob
#   registry_cleanup                    stop everything this file started

REGISTRY_PIDS=()
REGISTRY_PID=
REGISTRY_DIR=
REGISTRY_PORT=
REGISTRY=
REGISTRY_AUTH=

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_http URL CODE SECONDS: polls until URL answers CODE; bounded.
wait_http() {
  local i code
  for ((i = 0; i < $3 * 10; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)
    [[ $code == "$2" ]] && return 0
    sleep 0.1
  done
  echo "registry.sh: $1 did not answer $2 within $3 s" >&2
  return 1
}

registry_start() {
  REGISTRY_DIR=$1
  REGISTRY_PORT=${2:-$(free_port)}
  REGISTRY=127.0.0.1:$REGISTRY_PORT
  REGISTRY_AUTH=${3:-}
  mkdir -p "$REGISTRY_DIR/data"
  local auth=""
  if [[ $REGISTRY_AUTH == token ]]; then
    if [[ ! -f $REGISTRY_DIR/token.port ]]; then
      openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=cairn-test-token \
        -keyout "$REGISTRY_DIR/token.key" -out "$REGISTRY_DIR/token.crt" 2>/dev/null
      free_port >"$REGISTRY_DIR/token.port"
      python3 "$(dirname "${BASH_SOURCE[0]}")/../helpers/token_server.py" "$(cat "$REGISTRY_DIR/token.port")" \
        "$REGISTRY_DIR/token.key" "$REGISTRY_DIR/token.crt" 2>"$REGISTRY_DIR/token.log" &
      REGISTRY_PIDS+=($!)
      wait_http "http://127.0.0.1:$(cat "$REGISTRY_DIR/token.port")/healthz" 200 10 || return 1
    fi
    auth="auth:
  token:
    realm: http://127.0.0.1:$(cat "$REGISTRY_DIR/token.port")/token
    service: cairn-test-registry
    issuer: cairn-test-issuer
    rootcertbundle: $REGISTRY_DIR/token.crt"
  fi
  local tls="" scheme=http
  if [[ $REGISTRY_AUTH == tls ]]; then
    local c=$REGISTRY_DIR/certs
    mkdir -p "$c"
    if [[ ! -f $c/ca.crt ]]; then
      openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=cairn-test-ca \
        -keyout "$c/ca.key" -out "$c/ca.crt" 2>/dev/null
      openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
        -keyout "$c/server.key" -out "$c/server.csr" 2>/dev/null
      printf 'subjectAltName=IP:127.0.0.1\n' >"$c/san.ext"
      openssl x509 -req -in "$c/server.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
        -days 2 -extfile "$c/san.ext" -out "$c/server.crt" 2>/dev/null
    fi
    tls=", tls: { certificate: $c/server.crt, key: $c/server.key }"
    scheme=https
  fi
  cat >"$REGISTRY_DIR/config.yml" <<EOC
version: 0.1
log: { level: error, accesslog: { disabled: true } }
storage:
  filesystem: { rootdirectory: $REGISTRY_DIR/data }
  delete: { enabled: true }
http: { addr: $REGISTRY$tls }
$auth
EOC
  docker-registry serve "$REGISTRY_DIR/config.yml" >>"$REGISTRY_DIR/registry.log" 2>&1 &
  REGISTRY_PID=$!
  REGISTRY_PIDS+=($REGISTRY_PID)
  local want=200
  [[ $REGISTRY_AUTH == token ]] && want=401
  CURL_CA_BUNDLE=${tls:+$REGISTRY_DIR/certs/ca.crt} wait_http "$scheme://$REGISTRY/v2/" $want 10
}

registry_stop() {
  if [[ -n $REGISTRY_PID ]]; then
    kill "$REGISTRY_PID" 2>/dev/null || true
    wait "$REGISTRY_PID" 2>/dev/null || true
    REGISTRY_PID=
  fi
}

registry_push() {
  local dir=$1 ref=$2 dest=$3
  shift 3
  skopeo copy -q --dest-tls-verify=false "$@" "oci:$dir:$ref" "docker://$REGISTRY/$dest" >/dev/null
}

registry_blob_path() {
  local hex=${1#sha256:}
  echo "$REGISTRY_DIR/data/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data"
}

# proxy_start DIR [ARGS...]: the shaping proxy (tests/helpers/shaping_proxy.py,
# ARGS: its --rate, --latency ...) in front of the registry, its port file
# and log in DIR (made); sets PROXY (127.0.0.1:PORT) and PROXY_PID;
# registry_cleanup stops it. proxy_counts and proxy_reset read and zero
# its counters; proxy_log lists its requests; proxy_fetched DIGEST counts
# those for a blob.
proxy_start() {
  local dir=$1 i
  shift
  mkdir -p "$dir"
  rm -f "$dir/proxy.port"
  python3 "$(dirname "${BASH_SOURCE[0]}")/../helpers/shaping_proxy.py" "$dir/proxy.port" \
    "$REGISTRY_PORT" "$@" 2>"$dir/proxy.log" &
  PROXY_PID=$!
  REGISTRY_PIDS+=($PROXY_PID)
  for ((i = 0; i < 100; i++)); do
    [[ -s $dir/proxy.port ]] && break
    sleep 0.1
  done
  [[ -s $dir/proxy.port ]] || { echo "registry.sh: the proxy did not start" >&2; return 1; }
  PROXY=127.0.0.1:$(cat "$dir/proxy.port")
  wait_http "http://$PROXY/v2/" "$([[ $REGISTRY_AUTH == token ]] && echo 401 || echo 200)" 10
}

proxy_counts() { curl -sf "http://${1:-$PROXY}/_proxy/counts"; }
proxy_reset() { curl -sf "http://${1:-$PROXY}/_proxy/reset" >/dev/null; }
# proxy_log: the requests since the last reset, [[PATH, RANGE], ...] in order.
proxy_log() { curl -sf "http://${1:-$PROXY}/_proxy/log"; }
# proxy_fetched DIGEST: how many of the proxy's requests since the last
# reset were for blob DIGEST.
proxy_fetched() {
  proxy_log | jq --arg d "$1" '[.[] | select(.[0] | endswith("/blobs/" + $d))] | length'
}

registry_cleanup() {
  local p
  for p in "${REGISTRY_PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${REGISTRY_PIDS[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  REGISTRY_PIDS=()
  REGISTRY_PID=
}

# podman_push_chunked DIR REPO:TAG: DIR's tree as an image that podman
# (a store of its own under $T; PODMAN its command line) pushes to
# $REGISTRY/REPO:TAG as zstd:chunked. The tar has no record padding after
# its end-of-archive blocks (as Go's archive/tar writes): podman 4.3's
# zstd:chunked writer drops it, so the blob would decompress to less than
# its diff_id's tar (cairn proves it with the zeros: test_pull_partial.sh
# pushes such a tar too); the tests that count bytes want none.
podman_push_chunked() {
  PODMAN=(podman --root "$T/pm" --runroot "$T/pmrun" --storage-driver vfs)
  tar -C "$1" --sort=name -b 1 -cf "$1.tar" . &&
    "${PODMAN[@]}" import -q "$1.tar" "localhost/$2" >/dev/null &&
    "${PODMAN[@]}" push -q --tls-verify=false --compression-format zstd:chunked \
      "localhost/$2" "docker://$REGISTRY/$2"
}

# registry_manifest REPO TAG: the image manifest the registry holds.
registry_manifest() {
  curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY/v2/$1/manifests/$2"
}

# ---- shared by the pull tests ------------------------------------------------
# pull_test_init: every process this file starts is stopped when the test
# ends; OCI_IMAGE (the image builder), ST (= $STORE);
# the working directory is $T.
pull_test_init() {
  on_exit registry_cleanup
  OCI_IMAGE="python3 $HELPERS/oci_image.py"
  ST=$STORE
  cd "$T" || exit 1
}

# image_count: how many images the store holds.
image_count() {
  cairn images --json | jq length
}
