#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_auth.sh — a real docker-registry with token auth (the token
# service is token_server.py, which signs RS256 JWTs the registry checks
# against its rootcertbundle): the WWW-Authenticate Bearer flow with basic
# credentials from --creds (USER:PASS, or USER with the password on stdin)
# or an auth.json, or docker's config.json ($DOCKER_CONFIG, ~/.docker);
# refused credentials are an error at once, not retried.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

setup $OCI_IMAGE layer base.tar base 10 4000
setup $OCI_IMAGE add oci app linux/amd64 base.tar:zstd >/dev/null
setup registry_start "$T/reg" "" token
setup registry_push "$T/oci" app team/app:1 --dest-creds alice:secret
id=$($OCI_IMAGE config-digest oci app)
src="docker://$REGISTRY/team/app:1"
export HOME=$T/home REGISTRY_AUTH_FILE=$T/none.json
unset XDG_RUNTIME_DIR

expect_exit 1 "no credentials: refused" cairn pull --insecure "$src"
grep -q "token service refused" "$T/stderr" || fail "unclear auth error: $(cat "$T/stderr")"
grep -q "(no credentials: cairn login $REGISTRY, or --creds USER)" "$T/stderr" ||
  fail "the refusal does not say how to log in: $(cat "$T/stderr")"
ok "the refusal says how to give credentials: cairn login HOST, or --creds USER"
[[ $(grep -vc "^cairn: created store" "$T/stderr") == 1 ]] || fail "auth refusal retried or chatty: $(cat "$T/stderr")"
expect_exit 1 "wrong password: refused" cairn pull --insecure --creds alice:nope "$src"

expect_exit 0 "--creds" cairn pull --insecure --creds alice:secret "$src"
[[ $(cat "$T/stdout") == "$id" ]] || fail "token pull gave $(cat "$T/stdout")"
grep -q "pull: --creds USER:PASS: warning: every user sees the password in ps.*--creds USER reads it from stdin, or use cairn login" "$T/stderr" ||
  fail "--creds USER:PASS gave no warning: $(cat "$T/stderr")"

# --creds USER: the password from stdin's first line, out of ps's sight.
expect_exit 0 "--creds USER, the password on stdin" \
  sh -c "echo secret | cairn --store '$T/st4' pull --insecure --creds alice '$src'"
[[ $(cat "$T/stdout") == "$id" ]] || fail "--creds USER pull gave $(cat "$T/stdout")"
expect_exit 1 "--creds USER, a wrong password on stdin: refused" \
  sh -c "echo nope | cairn --store '$T/st5' pull --insecure --creds alice '$src'"
expect_exit 2 "--creds USER, nothing on stdin: a usage error" \
  cairn --store "$T/st5" pull --insecure --creds alice "$src" </dev/null
grep -q "pull: --creds alice: no password on stdin" "$T/stderr" ||
  fail "--creds USER without a password said: $(cat "$T/stderr")"

# The same from an auth.json (as podman/skopeo login write it).
cairn rm "$REGISTRY/team/app:1" >/dev/null 2>&1
printf '{"auths":{"%s":{"auth":"%s"}}}' "$REGISTRY" "$(printf alice:secret | base64)" >"$T/auth.json"
REGISTRY_AUTH_FILE=$T/auth.json expect_exit 0 "REGISTRY_AUTH_FILE" \
  cairn --store "$T/st2" pull --insecure "$src"
mkdir -p "$HOME/.docker" && cp "$T/auth.json" "$HOME/.docker/config.json"
expect_exit 0 "~/.docker/config.json" cairn --store "$T/st3" pull --insecure "$src"
# docker's config.json alone, at $DOCKER_CONFIG, as docker login writes it
# (its key a URL, other fields beside auths); an entry of another host only
# gives nothing
rm "$HOME/.docker/config.json"
mkdir -p "$T/dockercfg"
printf '{"auths":{"https://%s/v1/":{"auth":"%s"}},"HttpHeaders":{"User-Agent":"x"}}' \
  "$REGISTRY" "$(printf alice:secret | base64)" >"$T/dockercfg/config.json"
DOCKER_CONFIG=$T/dockercfg expect_exit 0 "\$DOCKER_CONFIG/config.json alone" \
  cairn --store "$T/st6" pull --insecure "$src"
[[ $(cat "$T/stdout") == "$id" ]] || fail "the config.json pull gave $(cat "$T/stdout")"
printf '{"auths":{"other.example:5000":{"auth":"%s"}}}' "$(printf alice:secret | base64)" \
  >"$T/dockercfg/config.json"
DOCKER_CONFIG=$T/dockercfg expect_exit 1 "a config.json of another host only: refused" \
  cairn --store "$T/st7" pull --insecure "$src"
finish
