#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_config.sh — cairn.conf: the system file ($CAIRN_CONFIG_SYSTEM
# here, /etc/cairn/cairn.conf by default) and the user's
# ($XDG_CONFIG_HOME/cairn/cairn.conf). The store path's precedence, flag >
# CAIRN_STORE > user > system > default, in cairn, cairn-pin and cairnfs
# alike, and in cairn info (files read, where the store came from); pull
# jobs; strict parsing (PATH:LINE: WHY, exit 2); registry mirrors tried
# before the registry (a name that does not resolve, and two real
# registries); insecure registries (plain HTTP only for those listed).
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
unset CAIRN_STORE
export CAIRN_CONFIG_SYSTEM=$T/system.conf XDG_CONFIG_HOME=$T/xdg
USER_CONF=$T/xdg/cairn/cairn.conf
mkdir -p "$T/xdg/cairn"
info() { cairn info --json | jq -r "$1"; }

# ---- the store path ---------------------------------------------------------
printf '# the system store\nstore = %s\n' "$T/sys" >"$CAIRN_CONFIG_SYSTEM"
# A cairn that reads no file would use the default store, outside $T: stop.
setup grep -qx "Default here: $T/sys" <(cairn --help)
check "system file: its store" [ "$(info '.store.dir + " " + .store.from')" = "$T/sys $CAIRN_CONFIG_SYSTEM" ]
check "info: the system file read, the user's not there" \
  [ "$(info '[.config.system, .config.system_read, .config.user, .config.user_read] | join(" ")')" = \
  "$CAIRN_CONFIG_SYSTEM true $USER_CONF false" ]
printf 'store = "%s"\n' "$T/user" >"$USER_CONF"
check "user file over system file" [ "$(info '.store.dir + " " + .store.from')" = "$T/user $USER_CONF" ]
check "info (table) names both files and the one that chose the store" sh -c \
  "cairn info | grep -qx 'config files: *$CAIRN_CONFIG_SYSTEM (read), $USER_CONF (read)' &&
   cairn info | grep -qx 'store chosen by: *$USER_CONF'"
check "CAIRN_STORE over the files" [ "$(CAIRN_STORE=$T/env info '.store.dir + " " + .store.from')" = "$T/env CAIRN_STORE" ]
check "--store over all" [ "$(CAIRN_STORE=$T/env cairn --store "$T/flag" info --json | jq -r '.store.dir + " " + .store.from')" = "$T/flag --store" ]
check "help's default follows the files" grep -qx "Default here: $T/user" <(cairn --help)
check "no file: the default" grep -qx "Default here: /var/lib/cairn" <(env -u XDG_CONFIG_HOME HOME=/nonexistent CAIRN_CONFIG_SYSTEM=/nonexistent cairn --help)

# All three programs open the store the files name.
two_layers
setup cairn import -q app:1 "$T/1.tar" "$T/2.tar"
check "cairn stored it in the user file's store" [ -f "$T/user/meta.db" ]
check "cairn-pin finds the image there" cairn-pin hold app:1 -- true
mkdir -p "$T/mnt"
expect_exit 0 "cairnfs mounts from the user file's store" cairnfs app:1 "$T/mnt"
on_exit "cairn umount $T/mnt"
check "the mount serves the image" grep -qx top "$T/mnt/top"
check "cairn umount finds its record there" cairn umount -q "$T/mnt"

# ---- strict parsing -----------------------------------------------------------
refused() { # WHAT LINE MESSAGE CONTENT
  printf '%b' "$4" >"$USER_CONF"
  expect_exit 2 "$1: exit 2" cairn images
  check "$1: cairn: PATH:LINE: WHY" grep -qxF "cairn: $USER_CONF:$2: $3" "$T/stderr"
}
refused "unknown key" 2 "unknown key 'stor' (before any section: store, pull-jobs)" '# x\nstor = /x\n'
refused "a line with no =" 3 "expected KEY = VALUE, not 'store /x'" '\n\nstore /x\n'
refused "a relative store" 1 "store: needs an absolute path, not 'rel/x'" 'store = rel/x\n'
refused "pull-jobs 0" 1 "pull-jobs: needs a number from 1 to 64, not '0'" 'pull-jobs = 0\n'
refused "a bad section" 1 "bad section '[mirror \"x\"]' (expected [registry \"HOST[:PORT]\"])" '[mirror "x"]\n'
refused "a key of the wrong section" 2 "unknown key 'store' (in a [registry \"HOST\"] section: mirror, insecure)" '[registry "a.io"]\nstore = /x\n'
refused "insecure yes" 2 "insecure: needs true or false, not 'yes'" '[registry "a.io"]\ninsecure = yes\n'
refused "a mirror URL" 2 "mirror: needs HOST[:PORT], not 'http://m.io'" '[registry "a.io"]\nmirror = http://m.io\n'
printf 'bogus = 1\n' >"$USER_CONF"
expect_exit 2 "cairn-pin refuses it too" cairn-pin ls
check "cairn-pin: PATH:LINE: WHY" grep -qF "cairn-pin: $USER_CONF:1: unknown key 'bogus'" "$T/stderr"
expect_exit 2 "cairnfs refuses it too" cairnfs app:1 "$T/mnt"
check "cairnfs: names PATH:LINE" grep -qF "$USER_CONF:1: unknown key 'bogus'" "$T/stderr"
printf 'bogus = 1\n' >"$CAIRN_CONFIG_SYSTEM"
: >"$USER_CONF"
expect_exit 2 "the system file is checked too" cairn images
check "system: PATH:LINE: WHY" grep -qF "cairn: $CAIRN_CONFIG_SYSTEM:1: unknown key 'bogus'" "$T/stderr"

# ---- pull jobs ------------------------------------------------------------------
printf 'pull-jobs = 4\n' >"$CAIRN_CONFIG_SYSTEM"
printf 'store = %s\npull-jobs = 6\n' "$T/user" >"$USER_CONF"
check "pull-jobs: the user's over the system's" [ "$(info '"\(.config.pull_jobs) \(.config.pull_jobs_from)"')" = "6 $USER_CONF" ]
printf 'store = %s\n' "$T/user" >"$USER_CONF"
check "pull-jobs: the system's when the user sets none" [ "$(info '"\(.config.pull_jobs) \(.config.pull_jobs_from)"')" = "4 $CAIRN_CONFIG_SYSTEM" ]
: >"$CAIRN_CONFIG_SYSTEM"
check "pull-jobs: 3 by default" [ "$(info '"\(.config.pull_jobs) \(.config.pull_jobs_from)"')" = "3 the default" ]

# ---- registries: insecure and mirrors ------------------------------------------------
setup $OCI_IMAGE layer a.tar a 3 1000
setup $OCI_IMAGE layer b.tar b 3 1000
setup $OCI_IMAGE add oci app linux/amd64 a.tar:gzip >/dev/null
setup $OCI_IMAGE add oci other linux/amd64 b.tar:gzip >/dev/null
app_id=$($OCI_IMAGE config-digest oci app)
other_id=$($OCI_IMAGE config-digest oci other)
setup registry_start "$T/reg1"
setup registry_push "$T/oci" app team/app:1
R1=$REGISTRY
setup registry_start "$T/reg2"
setup registry_push "$T/oci" other team/app:1
setup registry_push "$T/oci" other team/other:1
R2=$REGISTRY

conf() { printf 'store = %s\n%b' "$T/user" "$1" >"$USER_CONF"; }
conf ''
expect_exit 1 "no --insecure, nothing in the files: HTTPS only" cairn pull -q "docker://$R1/team/app:1" a:1
check "and says how to allow plain HTTP" grep -q "insecure = true" "$T/stderr"
conf "[registry \"$R1\"]\ninsecure = true\n"
expect_exit 0 "insecure = true: plain HTTP to that registry" cairn pull -q "docker://$R1/team/app:1" a:1
expect_exit 1 "only to that one" cairn pull -q "docker://$R2/team/app:1" b:1

conf "[registry \"$R1\"]\ninsecure = true\n[registry \"nosuch.invalid:5000\"]\nmirror = $R1\n"
expect_exit 0 "a registry that does not resolve, pulled from its mirror" \
  cairn pull -q "docker://nosuch.invalid:5000/team/app:1"
check "the mirror's image" [ "$(cat "$T/stdout")" = "$app_id" ]
check "named after the registry, not the mirror" \
  [ "$(cairn images --json | jq -r --arg id "$app_id" '.[] | select(.id == $id) | .names | index("nosuch.invalid:5000/team/app:1")')" != null ]
conf "[registry \"$R1\"]\ninsecure = true\n[registry \"$R2\"]\ninsecure = true\nmirror = nosuch.invalid:5000\nmirror = $R1\n"
expect_exit 0 "mirrors first, in order: a dead one, then one that has it" cairn pull "docker://$R2/team/app:1" m:1
check "the mirror's image, not the registry's" [ "$(cat "$T/stdout")" = "$app_id" ]
check "the dead mirror is said" grep -q "mirror nosuch.invalid:5000: .*; trying $R1" "$T/stderr"
expect_exit 0 "a mirror without the image: the registry" cairn pull "docker://$R2/team/other:1" o:1
check "the registry's image" [ "$(cat "$T/stdout")" = "$other_id" ]
check "the mirror's 404 is said" grep -q "mirror $R1: .*not found; trying $R2" "$T/stderr"

# Per key, the user's file over the system's: its mirror lines replace the
# system's for that registry; what it does not set (R1 insecure) stays.
printf '[registry "%s"]\nmirror = nosuch.invalid:5000\n[registry "%s"]\ninsecure = true\n' "$R2" "$R1" \
  >"$CAIRN_CONFIG_SYSTEM"
conf "[registry \"$R2\"]\ninsecure = true\nmirror = $R1\n"
expect_exit 0 "the user's mirrors replace the system's" cairn pull "docker://$R2/team/app:1" u:1
check "the user's mirror served it" [ "$(cat "$T/stdout")" = "$app_id" ]
check "the system's mirror was not tried" sh -c "! grep -q nosuch '$T/stderr'"
finish
