#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fault_proxy.py — a tiny HTTP proxy in front of a real registry on
127.0.0.1 that injects faults, for test_pull_transient.sh.

  fault_proxy.py PORTFILE UPSTREAM_PORT
      listens on a free port of 127.0.0.1 (written to PORTFILE once it
      accepts), forwards GETs to 127.0.0.1:UPSTREAM_PORT

Control (not forwarded, not counted):
  GET /_proxy/set?mode=M&n=N&match=REGEX[&retry_after=S][&extra=BYTES][&rate=B]
      resets the counters; the first N requests to each path matching
      REGEX (default: blob and manifest URLs) get the fault M:
        none   forward everything
        503    answer 503 Service Unavailable
        429    answer 429 Too Many Requests with Retry-After: S (default 1)
        drop   close the connection without a reply
        half   forward the headers and half the body, then close
        404    answer 404 BLOB_UNKNOWN
        401    answer 401 UNAUTHORIZED (no challenge)
        401b   answer 401 with a Basic challenge (a client with credentials
               answers it once, then must give up)
        more   forward, but send EXTRA bytes (default 64 MiB) more than
               the registry's body, with a Content-Length that says so
        slow   forward the body at RATE bytes a second (default 20 MiB)
  GET /_proxy/counts
      {"paths": {PATH: requests}, "faults": n, "cut": n}; "cut" counts
      replies the client stopped reading before their end
"""
import http.client, json, os, re, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

UPSTREAM = None
LOCK = threading.Lock()
STATE = {}

def reset(mode="none", n=0, match=r"/v2/.+/(blobs|manifests)/", retry_after=1, extra=64 << 20,
          rate=20 << 20):
    STATE.update(mode=mode, n=int(n), match=re.compile(match), retry_after=int(retry_after),
                 extra=int(extra), rate=int(rate), paths={}, faults=0, cut=0)

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: simple and enough

    def log_message(self, *args):
        pass

    def reply(self, code, body, headers=()):
        b = json.dumps(body).encode()
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def control(self, url):
        if url.path == "/_proxy/set":
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            with LOCK:
                reset(**q)
            return self.reply(200, {"ok": True})
        if url.path == "/_proxy/counts":
            with LOCK:
                body = {"paths": dict(STATE["paths"]), "faults": STATE["faults"], "cut": STATE["cut"]}
            return self.reply(200, body)
        return self.reply(200, {"ok": True})  # /_proxy/healthz

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path.startswith("/_proxy/"):
            return self.control(url)
        mode = "none"
        with LOCK:
            count = STATE["paths"].get(url.path, 0) + 1
            STATE["paths"][url.path] = count
            if STATE["match"].search(url.path) and count <= STATE["n"]:
                mode = STATE["mode"]
                if mode != "none":
                    STATE["faults"] += 1
            retry_after, extra, rate = STATE["retry_after"], STATE["extra"], STATE["rate"]
        if mode == "503":
            return self.reply(503, {"errors": [{"code": "UNAVAILABLE", "message": "injected 503"}]})
        if mode == "429":
            return self.reply(429, {"errors": [{"code": "TOOMANYREQUESTS", "message": "injected 429"}]},
                              [("Retry-After", str(retry_after))])
        if mode == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if mode == "404":
            return self.reply(404, {"errors": [{"code": "BLOB_UNKNOWN", "message": "injected 404"}]})
        if mode == "401":
            return self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "injected 401"}]})
        if mode == "401b":
            return self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "injected 401"}]},
                              [("WWW-Authenticate", 'Basic realm="cairn-test"')])
        self.forward(url, extra if mode == "more" else 0, mode == "half", rate if mode == "slow" else 0)

    def forward(self, url, extra, half=False, rate=0):
        up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=60)
        headers = {}
        for k, v in self.headers.items():  # repeated ones (Go sends one Accept per type) joined
            if k.lower() not in HOP and k.lower() != "host":
                headers[k] = headers[k] + ", " + v if k in headers else v
        headers["Host"] = self.headers.get("Host", "")
        up.request("GET", self.path, headers=headers)
        resp = up.getresponse()
        length = resp.getheader("Content-Length")
        body = None if length is not None else resp.read()
        size = int(length) if length is not None else len(body)
        if resp.status != 200:
            extra = 0
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(size + extra))
        self.end_headers()
        try:
            if half:
                self.wfile.write(resp.read(size // 2))
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif body is not None:
                self.wfile.write(body)
            else:
                start, sent = time.monotonic(), 0
                while chunk := resp.read(1 << 16):
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if rate:  # keep to rate bytes a second
                        time.sleep(max(0, start + sent / rate - time.monotonic()))
            zeros = bytes(1 << 16)
            while extra > 0:
                k = min(extra, len(zeros))
                self.wfile.write(zeros[:k])
                extra -= k
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with LOCK:
                STATE["cut"] += 1
        finally:
            up.close()

def main():
    global UPSTREAM
    portfile, UPSTREAM = sys.argv[1], int(sys.argv[2])
    reset()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()

if __name__ == "__main__":
    main()
