#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_rw_dpkg.sh — a writable mount holds a package manager: inside a crun container whose
# root is a `cairn mount --rw` of a Debian minbase image, `dpkg -i` of real
# .deb files succeeds: one built here with dpkg-deb (a conffile, a program
# in /usr/bin, a maintainer postinst that writes a file) and, when the host
# has it (scripts/setup.sh fetches it into the test cache with apt-get
# download; apt's own archive may hold it too), Debian's `hello`. dpkg
# exercises what a package manager needs of a file system: renames over
# existing files (.dpkg-new, the status file), hardlinked backups
# (.dpkg-tmp), fsync, a lock file. Then `dpkg -s` says installed inside the
# container; `cairn commit` gives an image that, mounted read-only, shows
# the packages installed (status and files), `cairn export` of it equals
# the rw mount's view, and the base image's export is byte-identical before
# and after all of it. No network: the packages are files on the host.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
set -e

command -v crun >/dev/null || fail "crun is not installed"
command -v dpkg-deb >/dev/null || fail "dpkg-deb is not installed"
minbase_layers "$T/layers"
cairn import debian:12 "$T"/layers/layer{1,2,3}.tar >/dev/null
cairn export debian:12 >"$T/before.tar"

# ---- the packages ----------------------------------------------------------
debs=$T/debs
pkg=$T/pkg
mkdir -p "$debs" "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/etc"
cat >"$pkg/DEBIAN/control" <<'EOF'
Package: cairn-probe
Version: 1.0
Architecture: all
Maintainer: cairn tests <cairn@example.invalid>
Description: a package the cairn dpkg test installs
 Its postinst writes /var/lib/cairn-probe.state.
EOF
echo /etc/cairn-probe.conf >"$pkg/DEBIAN/conffiles"
echo "setting=1" >"$pkg/etc/cairn-probe.conf"
printf '#!/bin/sh\necho cairn-probe-ran\n' >"$pkg/usr/bin/cairn-probe"
printf '#!/bin/sh\nset -e\n[ "$1" != configure ] || echo "configured" >/var/lib/cairn-probe.state\n' \
  >"$pkg/DEBIAN/postinst"
chmod 755 "$pkg/usr/bin/cairn-probe" "$pkg/DEBIAN/postinst"
dpkg-deb --root-owner-group --build "$pkg" "$debs/cairn-probe_1.0_all.deb" >/dev/null
# version 1.1: an upgrade replaces the files dpkg already installed
sed -i 's/^Version: 1.0/Version: 1.1/' "$pkg/DEBIAN/control"
printf '#!/bin/sh\necho cairn-probe-1.1-ran\n' >"$pkg/usr/bin/cairn-probe"
dpkg-deb --root-owner-group --build "$pkg" "$debs/cairn-probe_1.1_all.deb.later" >/dev/null
hello=""
for f in "$CACHE"/debs/hello_*_amd64.deb /var/cache/apt/archives/hello_*_amd64.deb; do
  if [ -f "$f" ]; then
    hello=$f
    break
  fi
done
if [ -n "$hello" ]; then
  cp "$hello" "$debs/"
else
  echo "# no hello .deb on this host (scripts/setup.sh fetches one): the built package only"
fi

# ---- dpkg -i in crun on a --rw mount ----------------------------------------
bundle=$T/bundle
mkdir -p "$bundle/rootfs"
cairn mount --rw debian:12 "$bundle/rootfs" >/dev/null
(cd "$bundle" && crun spec)
script='set -e
dpkg -i /mnt/*.deb
dpkg -i /mnt/cairn-probe_1.1_all.deb.later
dpkg -s cairn-probe | grep -x "Status: install ok installed"
dpkg -s cairn-probe | grep -x "Version: 1.1"
cairn-probe
cat /var/lib/cairn-probe.state
if [ -e /mnt/hello_*.deb ]; then dpkg -s hello | grep -x "Status: install ok installed"; hello; fi
dpkg --audit
echo done'
jq --arg debs "$debs" --arg script "$script" '.root.path = "rootfs" | .root.readonly = false
    | .process.terminal = false | .process.args = ["/bin/sh", "-c", $script]
    | .mounts += [{"destination": "/mnt", "type": "bind", "source": $debs,
                   "options": ["rbind", "ro"]}]' \
  "$bundle/config.json" >"$bundle/config.new"
mv "$bundle/config.new" "$bundle/config.json"
timeout 120 "${PRIVATE_NS[@]}" sh -c '
  umount /sys/fs/cgroup/unified 2>/dev/null
  exec crun --cgroup-manager=disabled run --bundle "$1" "$2"' sh "$bundle" "cairn-dpkg-$$" \
  </dev/null >"$T/stdout" 2>"$T/stderr" || fail "dpkg in crun failed: $(tail -20 "$T/stdout" "$T/stderr")"
grep -qx done "$T/stdout" && grep -qx cairn-probe-1.1-ran "$T/stdout" && grep -qx configured "$T/stdout" ||
  fail "unexpected output: $(cat "$T/stdout" "$T/stderr")"
if [ -n "$hello" ]; then
  grep -qx "Hello, world!" "$T/stdout" || fail "hello did not run: $(cat "$T/stdout")"
fi
ok "dpkg -i of $(ls "$debs"/*.deb | wc -l) .deb files (and an upgrade) in crun on a --rw mount: installed, upgraded, configured"

m=$bundle/rootfs
[ "$(cat "$m/etc/cairn-probe.conf")" = "setting=1" ] || fail "the conffile is not in the mount"
$FSTREE scan "$m" >"$T/view"

# ---- commit ------------------------------------------------------------------
cairn commit -q "$m" debian:dpkg
cairn export debian:dpkg >"$T/new.tar"
$FSTREE expect "$T/new.tar" >"$T/exported"
diff -u "$T/view" "$T/exported" >"$T/diff" ||
  fail "export of the committed image differs from the rw view: $(head -40 "$T/diff")"
ok "cairn export of the committed image equals the mount's view ($(wc -l <"$T/view") entries)"

ro=$T/ro
mkdir "$ro"
cairn mount debian:dpkg "$ro" >/dev/null
chroot "$ro" dpkg -s cairn-probe >"$T/status" || fail "dpkg -s on the committed image"
grep -qx "Status: install ok installed" "$T/status" && grep -qx "Version: 1.1" "$T/status" ||
  fail "not installed in the committed image: $(cat "$T/status")"
[ "$(chroot "$ro" cairn-probe)" = cairn-probe-1.1-ran ] || fail "the program in the committed image"
[ "$(cat "$ro/var/lib/cairn-probe.state")" = configured ] || fail "the postinst's file"
grep -qx /usr/bin/cairn-probe "$ro/var/lib/dpkg/info/cairn-probe.list" || fail "the package's file list"
if [ -n "$hello" ]; then
  [ "$(chroot "$ro" hello)" = "Hello, world!" ] || fail "hello in the committed image"
  chroot "$ro" dpkg -s hello | grep -qx "Status: install ok installed" || fail "hello's status"
fi
$FSTREE scan "$ro" >"$T/rov"
diff -u "$T/view" "$T/rov" >"$T/diff" ||
  fail "a read-only mount of the committed image differs: $(head -40 "$T/diff")"
cairn umount "$ro" >/dev/null
ok "a read-only mount of the committed image shows the packages installed"

cairn umount "$m" >/dev/null
not_mounted "$m" || fail "umount"
cairn export debian:12 >"$T/after.tar"
cmp "$T/before.tar" "$T/after.tar" || fail "the base image changed"
[ ! -e "$(ensure_minbase)/usr/bin/cairn-probe" ] || fail "the cached rootfs was written"
ok "the base image is byte-identical after install and commit"
