#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""token_server.py PORT KEY.pem CERT.pem — a registry token service for tests.

Implements the token endpoint of the Docker registry token auth spec: GET
/token?service=S&scope=repository:NAME:ACTIONS answers {"token": JWT} for
user alice with password secret (HTTP basic) and 401 otherwise; POST
/token, OAuth2's password grant (grant_type=password, username, password,
service, scope: containerd's first try), answers {"access_token": JWT}
for the same user. The JWT
expires TOKEN_TTL seconds (the environment's; default 600) after it is
made, less TOKEN_LEEWAY (default 0): a registry accepts a token that far
past its "exp" (docker-registry 2.8: 60 s). With TOKEN_TTL_FILE, the TTL
is that file's number, read at each token (a test that needs short
tokens makes them short after its setup's pushes). The JWT is
RS256-signed with KEY by the openssl command and carries CERT in x5c, which
the registry checks against its rootcertbundle (the same CERT).
"""
import base64, http.server, json, os, subprocess, sys, time, urllib.parse

PORT, KEY, CERT = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(CERT) as f:
    pem = f.read()
DER_B64 = "".join(l for l in pem.splitlines() if "-----" not in l)
USER = base64.b64encode(b"alice:secret").decode()

def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

def token(service, scopes):
    access = []
    for s in scopes:
        kind, rest = s.split(":", 1)
        name, actions = rest.rsplit(":", 1)
        access.append({"type": kind, "name": name, "actions": actions.split(",")})
    now = int(time.time())
    header = {"typ": "JWT", "alg": "RS256", "x5c": [DER_B64]}
    ttl = os.environ.get("TOKEN_TTL", "600")
    if os.environ.get("TOKEN_TTL_FILE"):
        with open(os.environ["TOKEN_TTL_FILE"]) as f:
            ttl = f.read().strip()
    exp = now + int(ttl) - int(os.environ.get("TOKEN_LEEWAY", "0"))
    claims = {"iss": "cairn-test-issuer", "sub": "alice", "aud": service, "exp": exp,
              "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(), "access": access}
    signing = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signing.encode(),
                         stdout=subprocess.PIPE, check=True).stdout
    return signing + "." + b64url(sig)

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("token: " + fmt % args + "\n")

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/healthz":
            return self.answer(200, {})
        if url.path != "/token":
            return self.answer(404, {})
        if self.headers.get("Authorization", "") != "Basic " + USER:
            return self.answer(401, {"details": "bad credentials"})
        q = urllib.parse.parse_qs(url.query)
        self.answer(200, {"token": token(q.get("service", [""])[0], q.get("scope", []))})

    # OAuth2's password grant (the spec's POST /token), which containerd
    # tries first when it has credentials: {"access_token": JWT}.
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        q = urllib.parse.parse_qs(self.rfile.read(n).decode())
        if urllib.parse.urlparse(self.path).path != "/token":
            return self.answer(404, {})
        if (q.get("grant_type") != ["password"] or q.get("username") != ["alice"]
                or q.get("password") != ["secret"]):
            return self.answer(401, {"details": "bad credentials"})
        scopes = " ".join(q.get("scope", [])).split()
        self.answer(200, {"access_token": token(q.get("service", [""])[0], scopes)})

http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
