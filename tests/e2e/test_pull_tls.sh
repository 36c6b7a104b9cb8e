#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_pull_tls.sh — docker:// is HTTPS by default and verifies the
# registry's certificate: a registry with a certificate from an unknown CA
# is refused (one line, exit 1, nothing committed); --cert-dir with the CA
# pulls it; --tls-verify=false (--insecure) pulls it without checks, as
# podman's; a plain-HTTP registry needs --insecure, which falls back to it.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init
setup $OCI_IMAGE layer base.tar base 10 4000
setup $OCI_IMAGE add oci app linux/amd64 base.tar:gzip >/dev/null
setup registry_start "$T/reg" "" tls
setup registry_push "$T/oci" app team/app:1
src="docker://$REGISTRY/team/app:1"

expect_exit 1 "an unknown CA is refused" cairn pull --retries 1 "$src"
check "the error is one line about the certificate" \
  sh -c "[ \$(grep -vc '^cairn: created store' stderr) = 1 ] && grep -qi 'certificate' stderr"
check "with a hint to use --cert-dir" grep -q -- "--cert-dir" stderr
check "nothing committed" [ "$(cairn images --json | jq length)" = 0 ]
mkdir "$T/certs" && cp "$T/reg/certs/ca.crt" "$T/certs/test-ca.crt"
expect_exit 0 "--cert-dir with the CA pulls over HTTPS" cairn pull --cert-dir "$T/certs" "$src"
check "the image id is the config digest" \
  [ "$(cat stdout)" = "$($OCI_IMAGE config-digest "$T/oci" app)" ]
expect_exit 0 "--tls-verify=false pulls over HTTPS without checks, as podman's" \
  cairn --store "$T/st3" pull --tls-verify=false "$src"
check "the same image" [ "$(cat stdout)" = "$($OCI_IMAGE config-digest "$T/oci" app)" ]
expect_exit 0 "--insecure too" cairn --store "$T/st4" pull --insecure --retries 1 "$src"
expect_exit 3 "a --cert-dir that does not exist is exit 3" cairn pull --cert-dir "$T/nope" "$src"
registry_cleanup

setup registry_start "$T/reg-http"
setup registry_push "$T/oci" app team/app:1
expect_exit 1 "plain HTTP without --insecure is refused" cairn --store "$T/st2" pull --retries 1 "docker://$REGISTRY/team/app:1"
check "with a hint to use --insecure" grep -q -- "--insecure" stderr
expect_exit 0 "plain HTTP with --insecure" cairn --store "$T/st2" pull --insecure "docker://$REGISTRY/team/app:1"
finish
