#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_readme.sh — the README's quick start runs as written, line by line,
# on a fresh store: each command exits 0 (or the code the README shows or
# says), and each output line the README shows is in what it printed (ids,
# pids and ages aside). The lines run unchanged; the test gives them what
# they name: base.tar, app.tar.gz, an OCI layout and ./long-job.sh in the
# working directory, Docker Hub as a registry mirror on 127.0.0.1 through
# cairn.conf, and /mnt and /run as tmpfs in a private mount namespace.
# crun and podman get, through wrappers on PATH, the flags this host needs
# (doc/testing.md): the README says which hosts need them.
if [ -z "${CAIRN_README_NS:-}" ]; then
  exec "$(dirname "$0")/../lib/private-ns" "" env CAIRN_README_NS=1 bash "$0" "$@"
fi
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib mount
use_lib registry
unset -f cairn cairn_pin # the README's lines run the programs themselves,
export CAIRN_STORE=$STORE # on the test's store (mount.sh unsets it)

for p in crun podman skopeo docker-registry; do
  command -v "$p" >/dev/null || fail "$p is not installed (scripts/setup.sh installs it)"
done
setup mount -t tmpfs -o mode=0755 tmpfs /mnt
setup mount -t tmpfs -o mode=0755 tmpfs /run
umount /sys/fs/cgroup/unified 2>/dev/null || true

# Whatever a failed line left mounted is unmounted (the daemons would keep
# this namespace's mounts alive).
readme_cleanup() {
  local d
  for d in /run/b/app/rootfs /mnt/work /mnt/app; do
    is_mounted "$d" && "$CAIRN_BIN/cairn" umount -q --discard -f "$d" 2>/dev/null
  done
  registry_cleanup
}
on_exit readme_cleanup

# ---- what the lines name
W=$T/work
mkdir -p "$W" "$T/bin" "$T/home"
minbase_layers "$T/layers"
cp "$T/layers/layer1.tar" "$W/base.tar"
gzip -c "$T/layers/layer3.tar" >"$W/app.tar.gz"
printf '#!/bin/sh\nexit 0\n' >"$W/long-job.sh"
chmod +x "$W/long-job.sh"
# (images of their own layers: the listings show app:1's alone)
seed() { CAIRN_STORE=$T/seed-store "$CAIRN_BIN/cairn" "$@" >/dev/null; }
mkdir -p "$T/seed/etc"
echo debian >"$T/seed/etc/hostname"
tar -C "$T/seed" -cf "$T/debian.tar" etc
echo layout >"$T/seed/etc/hostname"
tar -C "$T/seed" -cf "$T/layout.tar" etc
setup seed import -q debian "$T/debian.tar"
setup seed import -q layout "$T/layout.tar"
setup seed push -q debian "oci:$T/debian:v1"
setup seed push -q layout "oci:$W/layout:v1"
setup registry_start "$T/registry"
setup registry_push "$T/debian" v1 library/debian:bookworm
cat >"$T/cairn.conf" <<EOF
[registry "docker.io"]
mirror = $REGISTRY
[registry "$REGISTRY"]
insecure = true
EOF
export CAIRN_CONFIG_SYSTEM=$T/cairn.conf HOME=$T/home
unset XDG_CONFIG_HOME
cat >"$T/bin/crun" <<'EOF'
#!/bin/sh
exec /usr/bin/crun --cgroup-manager=disabled "$@"
EOF
cat >"$T/bin/podman" <<EOF
#!/bin/bash
sub=\$1
shift
exec /usr/bin/podman --cgroup-manager=cgroupfs --root "$T/podman-root" \\
  --runroot "$T/podman-runroot" "\$sub" --cgroups=disabled --ulimit nofile=1024:1024 \\
  --ulimit nproc=1024:1024 --network=none "\$@"
EOF
chmod +x "$T/bin/crun" "$T/bin/podman"
export PATH=$T/bin:$PATH
[ ! -e "$STORE" ] || fail "the store is not fresh"

# ---- the lines: CMD or OUT records, from the section's indented blocks
python3 - "${CAIRN_SRC:-$(dirname "$0")/../..}/README.md" >"$T/lines" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
blocks, cur = [], []
for line in section.split("\n"):
    if line.startswith("    "):
        cur.append(line[4:])
    elif cur and line.strip():
        blocks.append(cur)
        cur = []
if cur:
    blocks.append(cur)
for b in blocks:
    prompted = any(l.startswith("$ ") for l in b)
    for l in b:
        if not l.strip():
            continue
        if prompted and not l.startswith("$ "):
            print("OUT\t" + l)
        else:
            print("CMD\t" + re.sub(r"\s{2,}# .*$", "", l[2:] if prompted else l))
PY
[ "$(grep -c '^CMD' "$T/lines")" -ge 20 ] || fail "the quick start's lines were not found"

# norm: a line as compared: ids, numbers and ages made alike, spaces squeezed.
norm() {
  sed -E 's/[0-9a-f]{12}/ID/g; s/([0-9]+ (second|minute|hour)s?|Less than a second) ago/AGO/g;
    s/[0-9]+/N/g;
    s/[[:space:]]+/ /g; s/ $//'
}

# A line's exit code is 0 unless the next shows `echo $?`'s; a wait that
# cannot end while the image is mounted (as the README says) is 4.
mapfile -t recs <"$T/lines"
cd "$W"
prev=0 n=0
for ((i = 0; i < ${#recs[@]}; i++)); do
  [[ ${recs[i]} == CMD$'\t'* ]] || continue
  line=${recs[i]#CMD$'\t'}
  want=0
  case $line in
  'cairn-pin wait '* | 'cairn rm --wait '*) want=4 ;;
  esac
  if [[ ${recs[i + 1]:-} == OUT$'\t'* && ${recs[i + 2]:-} == 'CMD'$'\t''echo $?' ]]; then
    want=${recs[i + 3]#OUT$'\t'}
  fi
  rc=0
  timeout 120 bash -c "(exit $prev); $line" </dev/null >"$T/out" 2>"$T/err" || rc=$?
  prev=$rc
  echo "# $line: exit $rc"
  [ "$rc" = "$want" ] || fail "'$line' exits $want, not $rc: $(head -c 600 "$T/err")"
  for ((j = i + 1; j < ${#recs[@]}; j++)); do
    [[ ${recs[j]} == OUT$'\t'* ]] || break
    expect=$(printf '%s\n' "${recs[j]#OUT$'\t'}" | norm)
    cat "$T/out" "$T/err" | norm | grep -qxF -- "$expect" ||
      fail "'$line' prints '$expect': $(head -c 600 "$T/out") $(head -c 600 "$T/err")"
  done
  n=$((n + 1))
  [[ $line == podman* ]] && wait_for 10 sh -c "! pgrep -f '$T/[p]odman-root' >/dev/null"
done
ok "the README's quick start ran as written, $n lines, each as the README says"
for d in /mnt/app /mnt/work /run/b/app/rootfs; do
  not_mounted "$d" || fail "$d is still mounted after the quick start"
done
ok "the quick start leaves nothing mounted"
finish
