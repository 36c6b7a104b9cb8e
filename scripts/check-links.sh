#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# check-links.sh [ROOT] — finds dead links in the documentation: the
# Markdown files (README.md, doc/*.md, ...) and the man pages (doc/*.scd)
# of the tree at ROOT (default: this checkout). No network: only what
# points into the tree is checked.
#
# - A Markdown link [text](TARGET) or reference [x]: TARGET that is not a
#   URL (no scheme) must name a file or directory that exists, relative to
#   the file that holds it; TARGET#ANCHOR (or #ANCHOR alone) must also name
#   a heading of that Markdown file (GitHub's anchors: lower case,
#   punctuation dropped, spaces as '-', -1, -2 ... for repeats).
# - A path of the tree written as code (`doc/design.md`,
#   `tests/e2e/test_links.sh`) in Markdown, or written anywhere in a man
#   page, must exist: a page that names a file sends the reader to it.
#   Paths with a placeholder (an upper-case word such as NAME, or * ? {)
#   and bench/results/ (written by the benchmarks, not kept) are skipped.
# - A bare name ending in .md (TESTING.md) must exist beside the file or
#   at ROOT.
# Prints FILE:LINE: what is dead, one line each; exit 1 if any, else 0.
set -euo pipefail
ROOT=$(cd "${1:-$(dirname "$0")/..}" && pwd)
exec python3 - "$ROOT" <<'PY'
import os, re, sys

root = sys.argv[1]
TOP = r"(?:doc|bench|tools|tests|store|fs|include)/"
md_link = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
md_ref = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
code_span = re.compile(r"(`+)(.+?)\1")
tree_path = re.compile(r"^" + TOP + r"[A-Za-z0-9_.+/-]+$")
scd_path = re.compile(r"(?<![A-Za-z0-9_./$-])(" + TOP + r"[A-Za-z0-9_.+/-]*[A-Za-z0-9_/])")
bare_md = re.compile(r"(?<![A-Za-z0-9_./#(-])([A-Za-z0-9_][A-Za-z0-9_./-]*\.md)\b(?![(/#])")
placeholder = re.compile(r"(?:^|[/._-])[A-Z][A-Z0-9]+(?:$|[/._-])|[*?{}<>]")

def files():
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs
                   if not (x.startswith(".") or (rel == "." and x.startswith("build")))
                   and not (rel == "bench" and x == "results")]
        for n in sorted(names):
            if n.endswith(".md") or n.endswith(".scd"):
                yield os.path.join(d, n)

def slug(text):
    text = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", text.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen, out, fence = {}, set(), None
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
                if m:
                    fence = None if fence and m.group(1)[0] == fence[0] else (fence or m.group(1))
                    continue
                if fence:
                    continue
                m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    out.add(s if n == 0 else f"{s}-{n}")
        anchor_cache[path] = out
    return anchor_cache[path]

dead = []
def report(path, lineno, what):
    dead.append(f"{os.path.relpath(path, root)}:{lineno}: {what}")

def check_target(path, lineno, target):
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return  # a URL (http:, https:, mailto:, man: ...): not checked
    file_part, _, anchor = target.partition("#")
    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
    if not dest.startswith(root + os.sep) and dest != root:
        report(path, lineno, f"{target}: points outside the tree")
        return
    if not os.path.exists(dest):
        report(path, lineno, f"{target}: no such file")
        return
    if anchor and dest.endswith(".md") and os.path.isfile(dest):
        if anchor.lower() not in anchors(dest):
            report(path, lineno, f"{target}: no heading #{anchor} in {os.path.relpath(dest, root)}")

def check_tree_path(path, lineno, p):
    p = p.rstrip(".,;:")
    if placeholder.search(p) or p.startswith("bench/results"):
        return
    if not os.path.exists(os.path.join(root, p)):
        report(path, lineno, f"{p}: no such file in the tree")

def check_bare_md(path, lineno, name):
    if not (os.path.exists(os.path.join(os.path.dirname(path), name))
            or os.path.exists(os.path.join(root, name))):
        report(path, lineno, f"{name}: no such file")

for path in files():
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    if path.endswith(".scd"):
        for i, line in enumerate(lines, 1):
            for m in scd_path.finditer(line):
                check_tree_path(path, i, m.group(1))
            for m in bare_md.finditer(line):
                if not scd_path.match(m.group(1)):
                    check_bare_md(path, i, m.group(1))
        continue
    fence = None
    for i, line in enumerate(lines, 1):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            fence = None if fence and m.group(1)[0] == fence[0] else (fence or m.group(1))
            continue
        if fence or re.match(r"^(\t| {4,})\S", line):
            continue  # code blocks are examples, not links
        m = md_ref.match(line)
        if m:
            check_target(path, i, m.group(1))
        for c in code_span.finditer(line):
            if tree_path.match(c.group(2).strip()):
                check_tree_path(path, i, c.group(2).strip())
        text = code_span.sub("", line)
        for m in md_link.finditer(text):
            check_target(path, i, m.group(1))
        for m in bare_md.finditer(md_link.sub("", text)):
            check_bare_md(path, i, m.group(1))

for d in dead:
    print(d)
if dead:
    print(f"check-links: {len(dead)} dead link(s)", file=sys.stderr)
    sys.exit(1)
PY
