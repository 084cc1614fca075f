"""A token service: the token exists only in this process, so only a live service can hand it out."""
import http.server
import secrets
import sys

TOKEN = secrets.token_hex(8)
port = int(sys.argv[sys.argv.index("--port") + 1])


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": b"ok", "/token": TOKEN.encode()}.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
