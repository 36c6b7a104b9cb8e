#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""token_server.py PORT KEY.pem CERT.pem — a registry token service for tests.

Implements the token endpoint of the Docker registry token auth spec: GET
/token?service=S&scope=repository:NAME:ACTIONS answers {"token": JWT,
"expires_in": SECONDS} for user alice with password secret (HTTP basic),
and for user bob with password hunter2, whose tokens grant only
repositories under bob/ (the access asked for others is left out); 401
otherwise. Each token is logged as "token: issued to USER for SCOPES
(USER-AGENT)". A POST (OAuth2's) is answered 404.
The JWT expires TOKEN_TTL seconds (the environment's; default 600) after
it is made, less TOKEN_LEEWAY (default 0): a registry accepts a token
that far past its "exp" (docker-registry 2.8: 60 s). With TOKEN_TTL_FILE,
the TTL is that file's first number, read at each token (a test that
needs short tokens makes them short after its setup's pushes); a second
number there is the expires_in the answer states instead of the TTL (a
token that dies before it says: as one revoked). The JWT is
RS256-signed with KEY by the openssl command and carries CERT in x5c, which
the registry checks against its rootcertbundle (the same CERT).
"""
import base64, http.server, json, os, subprocess, sys, time, urllib.parse

PORT, KEY, CERT = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(CERT) as f:
    pem = f.read()
DER_B64 = "".join(l for l in pem.splitlines() if "-----" not in l)
USERS = {"Basic " + base64.b64encode(u.encode()).decode(): u.split(":")[0]
         for u in ("alice:secret", "bob:hunter2")}

def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

def token(user, service, scopes):
    access = []
    for s in scopes:
        kind, rest = s.split(":", 1)
        name, actions = rest.rsplit(":", 1)
        if user == "bob" and not name.startswith("bob/"):
            continue
        access.append({"type": kind, "name": name, "actions": actions.split(",")})
    now = int(time.time())
    header = {"typ": "JWT", "alg": "RS256", "x5c": [DER_B64]}
    ttl = os.environ.get("TOKEN_TTL", "600")
    if os.environ.get("TOKEN_TTL_FILE"):
        with open(os.environ["TOKEN_TTL_FILE"]) as f:
            ttl = f.read().strip()
    ttl, stated = (ttl.split() + [ttl.split()[0]])[:2]
    exp = now + int(ttl) - int(os.environ.get("TOKEN_LEEWAY", "0"))
    claims = {"iss": "cairn-test-issuer", "sub": user, "aud": service, "exp": exp,
              "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(), "access": access}
    signing = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signing.encode(),
                         stdout=subprocess.PIPE, check=True).stdout
    return {"token": signing + "." + b64url(sig), "expires_in": int(stated)}

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
        user = USERS.get(self.headers.get("Authorization", ""))
        if not user:
            return self.answer(401, {"details": "bad credentials"})
        q = urllib.parse.parse_qs(url.query)
        scopes = q.get("scope", [])
        sys.stderr.write("token: issued to %s for %s (%s)\n" % (
            user, " ".join(scopes), self.headers.get("User-Agent", "")))
        self.answer(200, token(user, q.get("service", [""])[0], scopes))

    def do_POST(self):
        # no OAuth2 POST: 404, as GCR's, on which containerd asks by GET
        self.answer(404, {})

http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
