#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""shaping_proxy.py — an HTTP proxy in front of a registry on 127.0.0.1
that makes loopback look like a network: every request waits LATENCY
before it is forwarded, and response bodies share one link of RATE bytes
a second (this kernel has no netem). For the lazy and partial pull tests
and benchmarks; it forwards every method, headers and bodies
as they are, so ranges (206, multipart/byteranges), uploads and auth
challenges pass through unchanged, and it counts what went through.

  shaping_proxy.py PORTFILE UPSTREAM_PORT [--rate BYTES] [--latency SECONDS]
      listens on a free port of 127.0.0.1 (written to PORTFILE once it
      accepts); defaults: 12500000 bytes/s (100 Mbit/s), 0.010 s

Control (not forwarded, not shaped, not counted):
  GET /_proxy/counts
      {"requests": n, "bytes": n (response body bytes sent), "ranges": n
       (requests with a Range header), "multi_ranges": n (of several
       ranges), "max_in_flight": n (most requests forwarded at once),
       "span": s (from the first request's arrival to the end of the last
       reply: the time spent on the network),
       "paths": {PATH: requests}, "statuses": {STATUS: replies} (as
       "401"), "connections": n (client connections
       that forwarded a request since the reset: a client that keeps its
       connection makes one for many requests)}
  GET /_proxy/log
      [[PATH, RANGE], ...]: the requests forwarded since the last reset, in
      the order they arrived (RANGE "" for none)
  GET /_proxy/reset      zeroes the counts and the log
  GET /_proxy/set?rate=B&latency=S   changes the shaping
  GET /_proxy/set?ranges=0   drops the Range header of requests (a registry
      that answers none: 200 and the whole blob); ranges=1 restores it
  GET /_proxy/set?flip=OFFSET   flips the blob's byte at OFFSET in every
      range reply (206, single or multipart) that holds it, as a registry
      or a network that corrupts it; replies of whole blobs keep it right.
      flip=-1 stops it
"""
import argparse, http.client, json, os, re, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOCK = threading.Lock()
CFG = {"rate": 12_500_000.0, "latency": 0.010, "upstream": 0, "ranges": True, "flip": -1}
LINK = {"free_at": 0.0, "in_flight": 0}  # when the shared link has sent everything queued
COUNTS = {}
LOG = []
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade"}
PIECE = 65536  # 5 ms of the link at 100 Mbit/s
BURST = 0.020


PART = re.compile(rb"content-range: *bytes (\d+)-(\d+)/", re.I)


def flip(body, content_range, at):
    """body (a 206's) with the blob's byte at offset at flipped, wherever
    a part of it holds that byte."""
    b = bytearray(body)
    m = PART.match(b"content-range: " + content_range.encode()) if content_range else None
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo <= at <= hi and at - lo < len(b):
            b[at - lo] ^= 0xFF
        return bytes(b)
    for m in PART.finditer(body):
        lo, hi = int(m.group(1)), int(m.group(2))
        start = body.find(b"\r\n\r\n", m.start())
        if start >= 0 and lo <= at <= hi and start + 4 + at - lo < len(b):
            b[start + 4 + at - lo] ^= 0xFF
    return bytes(b)


def reset():
    COUNTS.clear()
    COUNTS.update(requests=0, bytes=0, ranges=0, multi_ranges=0, max_in_flight=0, span=0.0,
                  paths={}, statuses={}, connections=0)
    LINK["epoch"] = LINK.get("epoch", 0) + 1  # a connection counts again after a reset
    LINK["in_flight"] = 0
    LINK["first"] = LINK["last"] = None
    LOG.clear()


def pace(n):
    """Waits until n more bytes have crossed the shared link: a token
    bucket BURST seconds deep, so that the proxy's own delays (a loaded
    machine) are caught up on instead of lowering the rate."""
    with LOCK:
        start = max(time.monotonic() - BURST, LINK["free_at"])
        LINK["free_at"] = start + n / CFG["rate"]
        done = LINK["free_at"]
    delay = done - time.monotonic()
    if delay > 0:
        time.sleep(delay)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def control(self, url):
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with LOCK:
            if url.path == "/_proxy/reset":
                reset()
            elif url.path == "/_proxy/set":
                if "rate" in q:
                    CFG["rate"] = float(q["rate"])
                if "latency" in q:
                    CFG["latency"] = float(q["latency"])
                if "ranges" in q:
                    CFG["ranges"] = q["ranges"] != "0"
                if "flip" in q:
                    CFG["flip"] = int(q["flip"])
            body = json.dumps(LOG if url.path == "/_proxy/log" else COUNTS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def forward(self):
        url = urlsplit(self.path)
        if url.path.startswith("/_proxy/"):
            return self.control(url)
        rng = self.headers.get("Range")
        with LOCK:
            COUNTS["requests"] += 1
            if getattr(self, "counted_in", None) != LINK["epoch"]:
                self.counted_in = LINK["epoch"]  # this connection's first since the reset
                COUNTS["connections"] += 1
            COUNTS["paths"][url.path] = COUNTS["paths"].get(url.path, 0) + 1
            LOG.append([url.path, rng or ""])
            if rng:
                COUNTS["ranges"] += 1
                if "," in rng:
                    COUNTS["multi_ranges"] += 1
            latency = CFG["latency"]
            ranges = CFG["ranges"]
            LINK["in_flight"] += 1
            if LINK["first"] is None:
                LINK["first"] = time.monotonic()
            COUNTS["max_in_flight"] = max(COUNTS["max_in_flight"], LINK["in_flight"])
        try:
            self.forward_one(url, latency, ranges)
        finally:
            with LOCK:
                LINK["in_flight"] = max(0, LINK["in_flight"] - 1)
                if LINK["first"] is not None:
                    LINK["last"] = time.monotonic()
                    COUNTS["span"] = round(LINK["last"] - LINK["first"], 4)

    def forward_one(self, url, latency, ranges):
        time.sleep(latency)
        body = None
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            body = self.rfile.read(n)
        # a list, not a dict: a header sent several times (podman's Accept)
        # is forwarded each time
        headers = [(k, v) for k, v in self.headers.items()
                   if k.lower() not in HOP and (ranges or k.lower() != "range")]
        up = http.client.HTTPConnection("127.0.0.1", CFG["upstream"], timeout=60)
        try:
            up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                up.putheader(k, v)
            up.endheaders(body)
            resp = up.getresponse()
            with LOCK:
                st = COUNTS["statuses"]
                st[str(resp.status)] = st.get(str(resp.status), 0) + 1
            self.send_response_only(resp.status, resp.reason)
            length = resp.getheader("Content-Length")
            for k, v in resp.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            if length is None and self.command != "HEAD" and resp.status not in (204, 304):
                # no length from upstream: close to delimit the body
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command == "HEAD":
                return
            with LOCK:
                at = CFG["flip"]
            whole = None
            if at >= 0 and resp.status == 206:
                whole = flip(resp.read(), resp.getheader("Content-Range"), at)
            while True:
                if whole is None:
                    piece = resp.read(PIECE)
                else:
                    piece, whole = whole[:PIECE], whole[PIECE:]
                if not piece:
                    break
                pace(len(piece))
                self.wfile.write(piece)
                with LOCK:
                    COUNTS["bytes"] += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            up.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("portfile")
    ap.add_argument("upstream", type=int)
    ap.add_argument("--rate", type=float, default=CFG["rate"])
    ap.add_argument("--latency", type=float, default=CFG["latency"])
    a = ap.parse_args()
    CFG.update(rate=a.rate, latency=a.latency, upstream=a.upstream)
    reset()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = a.portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, a.portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
