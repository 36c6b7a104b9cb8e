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
# tokens last 600 s until the checks of a token that dies early make them short
echo 600 >"$T/token.ttl"
export TOKEN_TTL_FILE=$T/token.ttl TOKEN_LEEWAY=60
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

# ---- one token for many requests --------------------------------------
# A process keeps the bearer tokens it got (by server, the challenge's
# realm and service, the scope and the credentials), for the lifetime
# the token service states: the fill of a lazy pull's 4 eStargz layers,
# a registry source a layer, asks the token service once (each source
# asked again before), and no source opened after the first token meets
# a 401 (its workers' first requests, sent at once, may each meet one).
# Counted behind the proxy (401s) and in the token service's log.
for i in 1 2 3 4; do
  mkdir -p "$T/ml$i/d$i"
  head -c 32768 /dev/urandom >"$T/ml$i/d$i/big"
  for k in 1 2 3; do echo "file $k of layer $i" >"$T/ml$i/d$i/small$k"; done
  setup tar -C "$T/ml$i" --sort=name -cf "$T/ml$i.tar" .
done
setup cairn --store "$T/src" import -q ml:1 "$T"/ml{1,2,3,4}.tar >/dev/null
setup cairn --store "$T/src" push -q --insecure --no-progress --format estargz \
  --creds alice:secret ml:1 "docker://$REGISTRY/team/ml:1" >/dev/null 2>&1
setup proxy_start "$T/px" --latency 0
printf '{"auths":{"%s":{"auth":"%s"},"%s":{"auth":"%s"}}}' \
  "$PROXY" "$(printf alice:secret | base64)" "$REGISTRY" "$(printf bob:hunter2 | base64)" \
  >"$T/px-auth.json"
export REGISTRY_AUTH_FILE=$T/px-auth.json
tokens() { grep -c 'GET /token' "$T/reg/token.log"; }
n401() { proxy_counts | jq '.statuses["401"] // 0'; }
t0=$(tokens)
expect_exit 0 "pull --lazy of 4 eStargz layers" \
  cairn --store "$T/ml" pull -q --insecure --lazy --no-fill "docker://$PROXY/team/ml:1"
mid=$(cat "$T/stdout")
check "... one token asked" test "$(($(tokens) - t0))" = 1
proxy_reset
t0=$(tokens)
expect_exit 0 "its fill" cairn --store "$T/ml" fill -q "$mid"
fill_tokens=$(($(tokens) - t0)) fill_401=$(n401)
echo "# the fill of 4 layers: $fill_tokens token requests, $fill_401 401s" >&2
check "... one token asked for its 4 layers ($fill_tokens)" test "$fill_tokens" = 1
check "... and no 401 but its 4 workers' first requests ($fill_401)" test "$fill_401" -le 4
check_json "... every file fetched" "(.[0].pending_files // 0) == 0" \
  cairn --store "$T/ml" images --json
# A token is the credentials' it was asked with: bob (the auth file's for
# $REGISTRY), whose tokens grant bob/ only, is refused team/ml, after
# alice's pull of it through the proxy as before.
expect_exit 1 "bob's pull of team/ml: refused" \
  cairn --store "$T/mlb" pull -q --insecure --lazy --no-fill "docker://$REGISTRY/team/ml:1"
grep -q "issued to bob for repository:team/ml:pull" "$T/reg/token.log" ||
  fail "bob got no token of his own: $(tail -3 "$T/reg/token.log")"

# A token that dies long before its stated lifetime (as one revoked: 2 s,
# said 600) is dropped at its 401 and a new one asked, by each source that
# has it and by every one opened later: the fill, slowed by the proxy to
# take several times that, still fetches every file.
echo "2 600" >"$T/token.ttl"
setup curl -sf "http://$PROXY/_proxy/set?rate=30000&latency=0.05" -o /dev/null
expect_exit 0 "pull --lazy, tokens that die early" \
  cairn --store "$T/ml2" pull -q --insecure --lazy --no-fill "docker://$PROXY/team/ml:1"
t0=$(tokens)
start=$(date +%s)
expect_exit 0 "... its fill outlives them" cairn --store "$T/ml2" fill -q "$mid"
took=$(($(date +%s) - start)) renewed=$(($(tokens) - t0))
echo "# the slowed fill took $took s and asked for $renewed tokens of 2 s" >&2
check "... took longer than two tokens last ($took s)" test "$took" -gt 4
check "... asked for new ones ($renewed)" test "$renewed" -gt 1
check_json "... every file fetched" "(.[0].pending_files // 0) == 0" \
  cairn --store "$T/ml2" images --json
unset REGISTRY_AUTH_FILE
finish
