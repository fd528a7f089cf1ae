#!/usr/bin/env python3
"""A token endpoint for librdkafka's OIDC client (sasl.oauthbearer.method=oidc), as trivup's
OauthbearerOIDCApp serves test 0126: POST /valid answers a token the broker accepts, /expired
one whose exp has passed, /invalid one that is not a JWT, /signed one the client takes but the
broker refuses (alg RS256 with a made-up signature: the unsecured validator takes alg none only). The tokens are unsecured JWTs
({"alg":"none"}, no signature): what Sluice's OAUTHBEARER validator, like Kafka's unsecured
one, checks. Usage: oidc_server.py PORTFILE (writes the port it listens on, then serves).
"""
import base64
import http.server
import json
import sys
import time


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(exp_offset: int, alg: str = "none", signature: str = "") -> str:
    now = int(time.time())
    claims = {"sub": "testuser", "iat": now, "exp": now + exp_offset, "scope": "test"}
    header = b64(json.dumps({"alg": alg}).encode())
    return f"{header}.{b64(json.dumps(claims).encode())}.{signature}"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/valid"):
            access = token(3600)
        elif self.path.startswith("/expired"):
            access = token(-3600)
        elif self.path.startswith("/signed"):
            access = token(3600, "RS256", b64(b"not a real signature"))
        elif self.path.startswith("/invalid"):
            access = "not.a.jwt"
        else:
            self.send_error(404)
            return
        body = json.dumps({"access_token": access, "token_type": "bearer", "expires_in": 3600}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("oidc_server: " + fmt % args + "\n")


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
