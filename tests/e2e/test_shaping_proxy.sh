#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_shaping_proxy.sh — the shaping proxy the lazy and partial pull tests
# put in front of a real registry (shaping_proxy.py): through it,
# Debian's docker-registry on 127.0.0.1 answers
#   an upload (POST, PUT) of a real zstd:chunked layer (podman 4.3.1's,
#   tests/fuzz/corpus/toc_zstd_chunked/) and a GET of all of it, identical;
#   a single range (the TOC, where the manifest annotation puts it): 206,
#   Content-Range, the bytes whose sha256 the annotation names;
#   several ranges at once (two chunks of a file): 206 multipart/byteranges,
#   each part the blob's bytes at its Content-Range;
# and the shaping holds: a body takes at least its size at the rate, each
# request at least the latency, and the counts say what went through.
source "$(dirname "$0")/../lib/test-lib.sh"
use_lib registry
pull_test_init

blob=$CAIRN_SRC/tests/fuzz/corpus/toc_zstd_chunked/podman-4.3.zst
size=$(stat -c %s "$blob")
digest=sha256:$(sha256sum "$blob" | cut -c1-64)
toc_off=301273 toc_len=835
toc_sum=sha256:70863ddaa086e290020cdaadf31c01dcb61d7c864617247e1b636bb17e787a06

setup registry_start "$T/reg"
rate=500000 # 500 kB/s: the layer (302 kB) takes 0.6 s
setup proxy_start "$T/proxy" --rate $rate --latency 0.010
now_ms() { date +%s%3N; }

# Upload through the proxy (POST then PUT: the registry's Location names the proxy).
loc=$(curl -sf -X POST -D - -o /dev/null "http://$PROXY/v2/lazy/t/blobs/uploads/" |
  tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
check "upload: the registry's Location points through the proxy" \
  test "${loc#http://"$PROXY"/}" != "$loc"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/octet-stream' \
  --data-binary @"$blob" "$loc&digest=$digest")
check "upload: PUT of the layer through the proxy is 201 (got $code)" test "$code" = 201
url=http://$PROXY/v2/lazy/t/blobs/$digest

# A whole GET: identical bytes, no faster than the rate.
curl -sf "http://$PROXY/_proxy/reset" >/dev/null
t0=$(now_ms)
curl -sf -o "$T/whole" "$url"
ms=$(($(now_ms) - t0))
check "GET: the blob through the proxy is the blob" cmp -s "$T/whole" "$blob"
min=$((size * 1000 / rate - 20)) # the link may send 20 ms ahead (its burst)
check "GET: $size bytes at $rate B/s take >= ${min} ms (took $ms ms)" test "$ms" -ge "$min"
check_json "counts: one request, $size body bytes" \
  ".requests == 1 and .bytes == $size and .ranges == 0" proxy_counts

# A single range: the TOC, checked against the annotation's checksum.
curl -sf "http://$PROXY/_proxy/reset" >/dev/null
end=$((toc_off + toc_len - 1))
curl -s -D "$T/h1" -o "$T/toc" -H "Range: bytes=$toc_off-$end" "$url"
check "range: 206 Partial Content" grep -q '^HTTP/1.1 206' "$T/h1"
check "range: Content-Range bytes $toc_off-$end/$size" \
  grep -qi "^Content-Range: bytes $toc_off-$end/$size" "$T/h1"
check "range: the TOC's sha256 is the annotation's" \
  test "sha256:$(sha256sum "$T/toc" | cut -c1-64)" = "$toc_sum"
check_json "counts: one range request, $toc_len bytes" \
  ".requests == 1 and .ranges == 1 and .multi_ranges == 0 and .bytes == $toc_len" proxy_counts

# Several ranges: two chunks of usr/bin/blobby (offsets from the TOC).
curl -sf "http://$PROXY/_proxy/reset" >/dev/null
curl -s -D "$T/h2" -o "$T/multi" -H "Range: bytes=587-214602,297323-300644" "$url"
check "multi-range: 206" grep -q '^HTTP/1.1 206' "$T/h2"
check "multi-range: multipart/byteranges" grep -qi '^Content-Type: multipart/byteranges' "$T/h2"
parts=$(python3 - "$T/h2" "$T/multi" "$blob" <<'EOF'
import re, sys
head, body, blob = open(sys.argv[1]).read(), open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
boundary = re.search(r"boundary=([^\s;]+)", head, re.I).group(1).strip('"').encode()
n = 0
for part in body.split(b"--" + boundary)[1:]:
    if part.startswith(b"--"):
        break
    hdr, _, data = part.partition(b"\r\n\r\n")
    m = re.search(rb"Content-Range: bytes (\d+)-(\d+)/(\d+)", hdr, re.I)
    a, b = int(m.group(1)), int(m.group(2))
    data = data[:-2] if data.endswith(b"\r\n") else data
    if data != blob[a:b + 1]:
        print("part %d-%d differs" % (a, b))
        sys.exit(1)
    n += 1
print(n)
EOF
)
check "multi-range: 2 parts, each the blob's bytes at its Content-Range (got $parts)" \
  test "$parts" = 2
check_json "counts: one multi-range request" \
  ".requests == 1 and .ranges == 1 and .multi_ranges == 1" proxy_counts

# Latency: each request waits for it. A lower bound per request holds
# however loaded the machine is (load only adds time): at 500 ms, each of
# 3 requests takes >= 500 ms (unshaped, one takes 3 to 250 ms here).
curl -sf "http://$PROXY/_proxy/set?rate=1e9&latency=0.5" >/dev/null
for i in 1 2 3; do
  s=$(curl -sf -o /dev/null -H "Range: bytes=$i-$i" -w '%{time_total}' "$url")
  check "latency: a request takes >= 0.5 s (took $s s)" \
    python3 -c "import sys; sys.exit(float('$s') < 0.5)"
done

# HEAD passes (what a client asks first for a blob's size).
len=$(curl -sfI "$url" | tr -d '\r' | sed -n 's/^[Cc]ontent-[Ll]ength: //p')
check "HEAD: Content-Length $size (got $len)" test "$len" = "$size"
finish
