# SPDX-License-Identifier: Apache-2.0
# rootfs.sh — sourced by benchmarks: a real Debian bookworm minbase rootfs
# (debootstrap, about 2 minutes the first time), cached in $CACHE.
CACHE=${CAIRN_TEST_CACHE:-/var/cache/cairn-test}

ensure_minbase_dir() {
  mkdir -p "$CACHE"
  if [ ! -d "$CACHE/minbase/usr/bin" ]; then
    echo "building a Debian minbase rootfs with debootstrap (once)..." >&2
    rm -rf "$CACHE/minbase.tmp"
    debootstrap --variant=minbase bookworm "$CACHE/minbase.tmp" >"$CACHE/debootstrap.log" 2>&1 ||
      { echo "debootstrap failed: $(tail -3 "$CACHE/debootstrap.log")" >&2; return 1; }
    mv "$CACHE/minbase.tmp" "$CACHE/minbase"
  fi
  echo "$CACHE/minbase"
}

# The whole rootfs as one layer tar.
ensure_minbase_tar() {
  local root
  root=$(ensure_minbase_dir) || return 1
  if [ ! -f "$CACHE/minbase-full.tar" ]; then
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -cf "$CACHE/minbase-full.tar.tmp" . &&
      mv "$CACHE/minbase-full.tar.tmp" "$CACHE/minbase-full.tar"
  fi
  echo "$CACHE/minbase-full.tar"
}
