"""An OAuth issuer for the end-to-end test of `sandpy serve --http` behind `sandpy.auth`.

    oauth_issuer.py AUDIENCE

Makes an RSA key (cryptography), serves on a free loopback port, with the issuer at the
path `/realms/test`, only OpenID Connect discovery with the path appended
(`/realms/test/.well-known/openid-configuration`, the last place sandpy looks) and the key
set it names; every other path is 404. Prints one JSON line, then serves until killed:

    {"issuer": "http://127.0.0.1:PORT/realms/test",
     "tokens": {"alice": ..., "bob": ..., "expired": ..., "other_audience": ...}}

The tokens are signed with PyJWT (RS256, `kid` "k1"), another JWT implementation than the
server's.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


def main() -> None:
    audience = sys.argv[1]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    issuer = f"http://127.0.0.1:{server.server_address[1]}/realms/test"
    documents = {
        "/realms/test/.well-known/openid-configuration": {
            "issuer": issuer,
            "jwks_uri": f"{issuer}/protocol/openid-connect/certs",
            "authorization_endpoint": f"{issuer}/auth",
            "token_endpoint": f"{issuer}/token",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        },
        "/realms/test/protocol/openid-connect/certs": {"keys": [jwk]},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            document = documents.get(self.path)
            body = json.dumps(document).encode() if document else b"not found"
            self.send_response(200 if document else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server.RequestHandlerClass = Handler
    now = int(time.time())

    def token(sub: str, **changes: object) -> str:
        claims = {"iss": issuer, "aud": audience, "sub": sub, "iat": now, "exp": now + 3600}
        claims.update(changes)
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})

    tokens = {
        "alice": token("alice"),
        "bob": token("bob"),
        "expired": token("alice", exp=now - 600),
        "other_audience": token("alice", aud="https://elsewhere.test/mcp"),
    }
    print(json.dumps({"issuer": issuer, "tokens": tokens}), flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the test closes stdin or kills the process


if __name__ == "__main__":
    main()
