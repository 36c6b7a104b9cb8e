#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_login.sh — `cairn login` checks the credentials against a real
# docker-registry with token auth (token_server.py, as test_pull_auth.sh
# sets it up) and only then writes them to the auth.json podman uses
# ($REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json),
# mode 0600, keeping the file's other entries; a pull, and skopeo, then
# find them there. `cairn logout` removes them (exit 3 when there are
# none); --all removes every registry's.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

setup $OCI_IMAGE layer base.tar base 4 1000
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip >/dev/null
setup registry_start "$T/reg" "" token
setup registry_push "$T/oci" app team/app:1 --dest-creds alice:secret
src="docker://$REGISTRY/team/app:1"
export HOME=$T/home REGISTRY_AUTH_FILE=$T/auth.json
unset XDG_RUNTIME_DIR XDG_CONFIG_HOME DOCKER_CONFIG
login() { cairn login --insecure "$@"; }

expect_exit 1 "wrong password: refused" sh -c "echo nope | cairn login --insecure -u alice --password-stdin $REGISTRY"
grep -q "login refused" "$T/stderr" || fail "unclear refusal: $(cat "$T/stderr")"
[[ $(wc -l <"$T/stderr") == 1 ]] || fail "refusal is not one line: $(cat "$T/stderr")"
[[ ! -e $T/auth.json ]] || fail "a refused login wrote $(cat "$T/auth.json")"

printf '{"auths": {"other.example": {"auth": "eDp5"}}, "credHelpers": {"x.example": "pass"}}' \
  >"$T/auth.json"
expect_exit 0 "login --password-stdin" sh -c "echo secret | cairn login --insecure -u alice --password-stdin $REGISTRY"
grep -qx "Login Succeeded!" "$T/stdout" || fail "login said: $(cat "$T/stdout")"
jq -e --arg h "$REGISTRY" --arg a "$(printf alice:secret | base64)" '.auths[$h].auth == $a
  and .auths["other.example"].auth == "eDp5" and .credHelpers["x.example"] == "pass"' \
  "$T/auth.json" >/dev/null || fail "auth.json: $(cat "$T/auth.json")"
[[ $(stat -c %a "$T/auth.json") == 600 ]] || fail "auth.json mode $(stat -c %a "$T/auth.json")"

# What login wrote is what a pull and skopeo read.
expect_exit 0 "pull with the login's credentials" cairn pull -q --insecure "$src"
expect_exit 0 "skopeo reads the login's auth.json" skopeo inspect --tls-verify=false "$src"

# Without REGISTRY_AUTH_FILE: $XDG_RUNTIME_DIR/containers/auth.json, made 0700.
expect_exit 0 "login to XDG_RUNTIME_DIR" env -u REGISTRY_AUTH_FILE XDG_RUNTIME_DIR="$T/run" \
  sh -c "echo secret | cairn login --insecure -u alice --password-stdin http://$REGISTRY/v2/"
jq -e --arg h "$REGISTRY" '.auths[$h].auth' "$T/run/containers/auth.json" >/dev/null ||
  fail "no entry in \$XDG_RUNTIME_DIR/containers/auth.json"
[[ $(stat -c %a "$T/run/containers") == 700 ]] || fail "containers/ mode $(stat -c %a "$T/run/containers")"
expect_exit 0 "pull reads \$XDG_RUNTIME_DIR's" env -u REGISTRY_AUTH_FILE XDG_RUNTIME_DIR="$T/run" \
  cairn --store "$T/st2" pull -q --insecure "$src"

# logout
expect_exit 0 "logout" cairn logout "$REGISTRY"
grep -qx "Removed login credentials for $REGISTRY" "$T/stdout" || fail "logout said: $(cat "$T/stdout")"
jq -e --arg h "$REGISTRY" '.auths[$h] == null and .auths["other.example"]' "$T/auth.json" \
  >/dev/null || fail "after logout: $(cat "$T/auth.json")"
expect_exit 1 "pull after logout: refused" cairn --store "$T/st3" pull -q --insecure "$src"
expect_exit 3 "logout twice: not logged in" cairn logout "$REGISTRY"
expect_exit 0 "logout --all" cairn logout --all
jq -e '.auths == {} and .credHelpers["x.example"] == "pass"' "$T/auth.json" >/dev/null ||
  fail "after logout --all: $(cat "$T/auth.json")"

# Bad input
expect_exit 2 "login --password-stdin without -u" cairn login --password-stdin "$REGISTRY"
expect_exit 2 "login with no terminal and no --password-stdin" setsid cairn login -u alice "$REGISTRY"
expect_exit 2 "login needs a registry" cairn login -u alice
expect_exit 2 "logout needs a registry" cairn logout
finish
