"""``tracemerge open``: hand a trace file to ui.perfetto.dev over a one-shot local HTTP server.

The UI fetches ``?url=`` traces from the browser, so the server must answer on loopback
with ``Access-Control-Allow-Origin: https://ui.perfetto.dev``. The UI's content security
policy only lets it fetch from http://127.0.0.1:9001, hence the default port (Perfetto's
own ``open_trace_in_ui`` uses the same one). The server stops once the whole file has
been sent, or on Ctrl-C.
"""

import http.server
import os
import urllib.parse
import webbrowser

from tracemerge.errors import OutputError, TraceError

UI_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001


def deep_link(port, name):
    return f"{UI_ORIGIN}/#!/?url=http://127.0.0.1:{port}/{urllib.parse.quote(name)}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "tracemerge"

    def _headers(self, status, length=0):
        self.send_response(status)
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Cache-Control", "no-cache")
        if status == 200:
            self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_OPTIONS(self):  # CORS preflight
        self._headers(204)

    def do_HEAD(self):
        if self._ours():
            self._headers(200, os.path.getsize(self.server.path))

    def do_GET(self):
        if not self._ours():
            return
        size = os.path.getsize(self.server.path)
        self._headers(200, size)
        with open(self.server.path, "rb") as f:
            sent = 0
            while chunk := f.read(1 << 20):
                self.wfile.write(chunk)
                sent += len(chunk)
        self.server.fetched = sent == size

    def _ours(self):
        if urllib.parse.unquote(urllib.parse.urlsplit(self.path).path) == "/" + self.server.name:
            return True
        self._headers(404)
        return False

    def log_message(self, fmt, *args):
        self.server.log(f"{self.address_string()} {fmt % args}")


def serve(path, port=DEFAULT_PORT, browser=False, on_ready=print, log=None):
    """Serve ``path`` until it was fetched whole (True) or Ctrl-C (False).

    ``on_ready(link)`` is called with the UI deep link once the server listens; ``log``
    gets one line per request.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TraceError(path, "no such file")
    try:
        server = http.server.HTTPServer(("127.0.0.1", port), _Handler)
    except OSError as e:
        raise OutputError(f"--port {port}: cannot listen on 127.0.0.1: {e.strerror or e}") from None
    server.path, server.name, server.fetched = path, os.path.basename(path), False
    server.log = log or (lambda line: None)
    with server:
        link = deep_link(server.server_address[1], server.name)
        on_ready(link)
        if browser:
            webbrowser.open(link)
        try:
            while not server.fetched:
                server.handle_request()
        except KeyboardInterrupt:
            return False
    return True
