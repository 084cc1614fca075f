#!/bin/bash
cat > /app/sum_server.py <<'PY'
import http.server, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        body = str(int(q["a"][0]) + int(q["b"][0])).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8741), H).serve_forever()
PY
nohup python3 /app/sum_server.py >/app/server.log 2>&1 &
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8741/sum?a=1&b=1', timeout=1)" 2>/dev/null && exit 0
  sleep 0.1
done
exit 1
