#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_cli_podman_habits.sh — what a podman user types works (it was exit
# 2): pull NAME and push IMAGE HOST/REPO with docker:// as the default
# transport, push IMAGE to its name's registry; --tls-verify=false as
# --insecure; inspect --format with podman's fields ({{.Config.Cmd}},
# {{.RootFS.Layers}}, {{range}}) and df --format with {{.Field}};
# export -o FILE (created or emptied, never through a planted symlink nor
# into another user's file); images NAME as a filter; images's rows as
# podman's: REPOSITORY and TAG, a row per name, <none> <none> untagged;
# images -a and --filter dangling=BOOL; image ls, image prune, system df,
# rmi, rm -a; save and load say the cairn way.
source "$(dirname "$0")/../lib/test-lib.sh"
two_layers
cd "$T" || exit 1

expect_exit 1 "pull NAME: docker:// by default" cairn pull --retries 1 nosuch.invalid:5000/app:1
check "it went to the registry (HTTPS)" grep -q "https://nosuch.invalid:5000/v2/" "$T/stderr"
expect_exit 1 "pull --tls-verify=false" cairn pull --tls-verify=false --retries 1 \
  docker://nosuch.invalid:5000/app:1
check "is HTTPS first (no checks), as podman's" grep -q "https://nosuch.invalid:5000/v2/" "$T/stderr"
expect_exit 2 "pull --tls-verify=maybe: refused" cairn pull --tls-verify=maybe x
expect_exit 2 "pull dir:X: refused, not a registry name" cairn pull dir:/x

id=$(cairn import -q app:1 1.tar 2.tar)
cairn import -q app:2 1.tar >/dev/null
expect_exit 1 "push IMAGE HOST/REPO: docker:// by default, as pull" \
  cairn push --retries 1 app:1 nosuch.invalid:5000/app:1
check "it went to the registry" grep -q "https://nosuch.invalid:5000/v2/" "$T/stderr"
cairn tag app:1 nosuch.invalid:5000/team/app:1 >/dev/null
expect_exit 1 "push IMAGE: to the registry of its name, as podman" \
  cairn push --retries 1 nosuch.invalid:5000/team/app:1
check "it went there" grep -q "https://nosuch.invalid:5000/v2/team/app/" "$T/stderr"
cairn rm nosuch.invalid:5000/team/app:1 >/dev/null
expect_exit 2 "push IMAGE with no host in its name: a usage error" cairn push app:1
check "says to give a DEST" grep -q "^cairn: push app:1: app:1: no registry in the name.*give a DEST" "$T/stderr"
cairn import -q other:1 2.tar >/dev/null
expect_exit 0 "inspect --format" cairn inspect --format '{{.Id}}\t{{json .Names}} {{.Config.rootfs.type}}' app:1
check "inspect --format: the fields" [ "$(cat "$T/stdout")" = "$id	[\"localhost/app:1\"] layers" ]
expect_exit 0 "inspect -f" cairn inspect -f '{{.Size}}' app:1
check "inspect -f: a number" grep -qxE "[0-9]+" "$T/stdout"
expect_exit 0 "inspect -f with podman's fields" cairn inspect -f \
  '{{.Id}} {{.Digest}} {{.Architecture}} {{.Os}} {{json .RepoTags}} {{json .Config.Cmd}}' app:1
check "inspect -f: podman's fields' values" \
  [ "$(cat "$T/stdout")" = "$id sha256:$id amd64 linux [\"localhost/app:1\"] []" ]
diff_ids=$(cairn inspect app:1 | jq -r '.config.rootfs.diff_ids | join(" ")')
check "inspect -f {{.RootFS.Layers}}: the diff_ids" \
  [ "$(cairn inspect -f '{{json .RootFS.Layers}}' app:1 | jq -r 'join(" ")')" = "$diff_ids" ]
check "inspect -f {{range .RootFS.Layers}}{{.}}\\n{{end}}: a line each" \
  [ "$(cairn inspect -f '{{range .RootFS.Layers}}{{.}}\n{{end}}' app:1 | grep . | tr '\n' ' ')" = "$diff_ids " ]
check "inspect -f {{range .Layers}}{{.Id}} {{end}}: cairn's layers" \
  [ "$(cairn inspect -f '{{range .Layers}}{{.Id}} {{end}}' app:1)" = \
  "$(cairn inspect app:1 | jq -r '[.layers[].id] | join(" ")') " ]
expect_exit 2 "inspect --format {{.Nope}}" cairn inspect --format '{{.Nope}}' app:1
check "names the fields" grep -q "not a field (fields: {{.Id}} {{.Digest}} {{.RepoTags}}" "$T/stderr"
expect_exit 2 "inspect --format {{range .Id}}: not a list" cairn inspect --format '{{range .Id}}x{{end}}' app:1
expect_exit 2 "inspect --format {{range .Layers}} with no {{end}}" cairn inspect --format '{{range .Layers}}x' app:1

expect_exit 0 "df --format" cairn df --format '{{.Type}}={{.Count}}'
check "df --format: a line per class" [ "$(cat "$T/stdout")" = "$(printf 'images=3\nlayers=2\nblobs=2\ncompressed=0')" ]
check "df --format json is --json" [ "$(cairn df --format json | jq length)" = 4 ]

expect_exit 0 "export -o FILE" cairn export -o out.tar app:1
check "export -o: the tar" [ "$(tar -tf out.tar | sort | tr "\n" " ")" = "./ base top " ]
head -c 100000 /dev/urandom >big && cp big out2.tar
expect_exit 0 "export -o an existing file of ours" cairn export -o out2.tar app:2
check "export -o: emptied first" [ "$(tar -tf out2.tar | sort | tr "\n" " ")" = "./ base " ]
echo precious >precious && ln -s precious link.tar
expect_exit 1 "export -o a symlink: refused" cairn export -o link.tar app:1
check "the symlink's target is untouched" [ "$(cat precious)" = precious ]
check "says why" grep -q "link.tar: is a symlink" "$T/stderr"
echo theirs >theirs.tar && chown nobody theirs.tar
expect_exit 1 "export -o another user's file: refused" cairn export -o theirs.tar app:1
check "it is untouched" [ "$(cat theirs.tar)" = theirs ]

expect_exit 0 "images app" cairn images -q --no-trunc app
check "images app: both tags of app" [ "$(sort "$T/stdout" | tr '\n' ' ')" = \
  "$(cairn images -q --no-trunc | grep -v "$(cairn inspect -f '{{.Id}}' other:1)" | sort | tr '\n' ' ')" ]
check "images app:1: only it" [ "$(cairn images -q --no-trunc app:1)" = "$id" ]
check "images localhost/other: other" [ "$(cairn images -q --no-trunc localhost/other)" = \
  "$(cairn inspect -f '{{.Id}}' other:1)" ]
check "images nope: no row" [ -z "$(cairn images -q nope)" ]

# The table as podman images: a row per name, REPOSITORY and TAG first.
cairn tag app:1 app:3 >/dev/null
expect_exit 0 "images" cairn images
check "images: podman's columns first" \
  grep -qE "^REPOSITORY +TAG +IMAGE ID +CREATED +SIZE +LAYERS +PINNED$" <(head -1 "$T/stdout")
check "images: app 1 and app 3, one image, two rows" \
  [ "$(grep -cE "^localhost/app +(1|3) +${id:0:12} " "$T/stdout")" = 2 ]
check "images: app 2 has its row" grep -qE "^localhost/app +2 +[0-9a-f]{12} " "$T/stdout"
expect_exit 0 "images app" cairn images app
check "images app: a row per tag" [ "$(tail -n +2 "$T/stdout" | awk '{ print $2 }' | sort | tr '\n' ' ')" = "1 2 3 " ]
check "images -q: an image once" [ "$(cairn images -q | grep -c "^${id:0:12}$")" = 1 ]
check "images --format {{.Repository}}:{{.Tag}}" \
  [ "$(cairn images --format '{{.Repository}}:{{.Tag}}' app | sort | tr '\n' ' ')" = \
  "localhost/app:1 localhost/app:2 localhost/app:3 " ]
check "images --json: an object per image, no repository or tag" \
  [ "$(cairn images --json | jq -c "[.[] | select(.id == \"$id\")] | [length, .[0].names, (.[0] | has(\"tag\") or has(\"repository\"))]")" = \
  '[1,["localhost/app:1","localhost/app:3"],false]' ]
other=$(cairn inspect -f '{{.Id}}' other:1)
sqlite3 "$STORE/meta.db" "DELETE FROM names WHERE image_id = '$other'"
rm -f "$STORE/refs" # a hand edit of the names drops STORE/refs, as cairn's writers do
check "images: an image without a name is <none> <none>" \
  grep -qE "^<none> +<none> +${other:0:12} " <(cairn images)

# podman's words: aliases where one fits, the cairn way where none does.
check "images --filter dangling=true: the untagged image only" \
  [ "$(cairn images -q --no-trunc --filter dangling=true)" = "$other" ]
check "images -f dangling=false: the others" \
  [ "$(cairn images -q --no-trunc -f dangling=false | grep -c "$other")" = 0 ]
check "images -a: every image" [ "$(cairn images -a -q | wc -l)" = "$(cairn images -q | wc -l)" ]
expect_exit 2 "images --filter nope=1: refused" cairn images --filter nope=1
# (not the default table: its CREATED ages may tick between two runs)
fmt='{{.Repository}} {{.Tag}} {{.ID}} {{.Size}} {{.Layers}}'
check "image ls is images" cmp -s <(cairn image ls --no-trunc --format "$fmt") \
  <(cairn images --no-trunc --format "$fmt")
# (its words: the columns' widths follow the CREATED ages too)
check "image ls has images' header" cmp -s <(cairn image ls | head -1 | tr -s ' ') \
  <(cairn images | head -1 | tr -s ' ')
check "image list is images" cmp -s <(cairn image list -q) <(cairn images -q)
check "system df is df" cmp -s <(cairn system df --json) <(cairn df --json)
check "image inspect is inspect" [ "$(cairn image inspect -f '{{.Id}}' app:1)" = "$id" ]
expect_exit 2 "save: no such command" cairn save -o x.tar app:1
check "save: says the cairn way" grep -q "^cairn: save: no such command; the cairn way: cairn push IMAGE docker-archive:FILE" "$T/stderr"
expect_exit 2 "load: no such command" cairn load -i x.tar
check "load: says the cairn way" grep -q "the cairn way: cairn pull docker-archive:FILE" "$T/stderr"
expect_exit 0 "image prune: removes the untagged images" cairn image prune
check "the untagged one is gone" [ -z "$(cairn images -q --filter dangling=true)" ]
check "the named ones stay" [ "$(cairn inspect -f "{{.Id}}" app:1)" = "$id" ]
expect_exit 2 "rm -a IMAGE: refused" cairn rm -a app:1
expect_exit 0 "rmi -a: every image goes" cairn rmi -a
check "none is left" [ -z "$(cairn images -q)" ]

finish
