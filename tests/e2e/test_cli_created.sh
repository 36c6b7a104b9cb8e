#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_created.sh — CREATED is the image's creation time, its config's
# "created", as podman shows it (it was when cairn stored the image):
# images' table and --json created, inspect's created; inspect and
# images --json also say stored, when this store got it. An image whose
# config has no created (cairn import) shows when it was stored.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

setup $OCI_IMAGE layer a.tar a 2 100
OCI_IMAGE_CONFIG='{"created": "2020-01-02T03:04:05.123456789Z"}' \
  setup $OCI_IMAGE add lay v1 linux/amd64 a.tar:raw >/dev/null
expect_exit 0 "pull" cairn pull -q oci:lay:v1 old:1
id=$(cat "$T/stdout")
check "inspect: created is the config's" [ "$(cairn inspect -f '{{.Created}}' old:1)" = 2020-01-02T03:04:05Z ]
stored=$(cairn inspect -f '{{.Stored}}' old:1)
now=$(date -u +%s)
check "inspect: stored is now" [ $((now - $(date -u -d "$stored" +%s))) -lt 120 ]
check "images --json: created is the config's" \
  [ "$(cairn images --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .created')" = 2020-01-02T03:04:05Z ]
check "images --json: and stored" \
  [ "$(cairn images --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .stored')" = "$stored" ]
check "images: CREATED says years ago" grep -qE " ${id:0:12} +[0-9]+ years ago " <(cairn images)

two_layers
cairn import -q new:1 "$T/1.tar" >/dev/null
check "import (no created in its config): created is when stored" \
  [ "$(cairn inspect -f '{{.Created}}' new:1)" = "$(cairn inspect -f '{{.Stored}}' new:1)" ]
finish
