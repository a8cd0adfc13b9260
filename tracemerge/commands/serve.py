"""``tracemerge open``: hand a trace file to ui.perfetto.dev over a one-shot local HTTP server.

The UI fetches ``?url=`` traces from the browser, so the server must answer on loopback
with ``Access-Control-Allow-Origin: https://ui.perfetto.dev``. The UI's content security
policy only lets it fetch from http://127.0.0.1:9001, hence the default port (Perfetto's
own ``open_trace_in_ui`` uses the same one). The server stops once the whole file has
been sent, or on Ctrl-C (exit 130).

The file is opened once, when the server starts, and every fetch gets exactly the bytes it
held then (a file that grows or is swapped afterwards is never streamed past its
Content-Length); a client that closes the connection mid-file is one line, and the file is
served again to the next fetch.

Only requests whose ``Host`` is 127.0.0.1 or localhost (with this port) are served: a web
page that points a name of its own at 127.0.0.1 (DNS rebinding) sends its own name and is
refused. Each connection has its own thread and a time limit, so a client that connects
and sends nothing does not hold the others up.
"""

import http.server
import os
import urllib.parse
import webbrowser
from typing import Callable, Optional, Union

from tracemerge.errors import OutputError, TraceError

UI_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001


def deep_link(port: int, name: str) -> str:
    # the name's bytes, percent-encoded: a name that is not UTF-8 is served too
    return f"{UI_ORIGIN}/#!/?url=http://127.0.0.1:{port}/{urllib.parse.quote(os.fsencode(name))}"


LOCAL_HOSTS = ("127.0.0.1", "localhost")
IDLE_SECONDS = 30  # a connection that sends no complete request in this time is dropped


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "tracemerge"
    timeout = IDLE_SECONDS
    server: "_Server"

    def _headers(self, status: int, length: int = 0) -> None:
        self.send_response(status)
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Cache-Control", "no-cache")
        if status == 200:
            self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_OPTIONS(self) -> None:  # CORS preflight
        if self._local():
            self._headers(204)

    def do_HEAD(self) -> None:
        if self._ours() and self._there():
            self._headers(200, self.server.size)

    def do_GET(self) -> None:
        if not (self._ours() and self._there()):
            return
        # the bytes of the file as it was opened, exactly Content-Length of them: a file that
        # grows, or is swapped for another, after the server started used to be streamed past it
        size = self.server.size
        self._headers(200, size)
        sent = 0
        try:
            while sent < size:
                chunk = os.pread(self.server.fd, min(1 << 20, size - sent), sent)
                if not chunk:  # cut short in place: the client sees a short body, not a longer one
                    break
                self.wfile.write(chunk)
                sent += len(chunk)
        except (ConnectionError, TimeoutError) as e:  # the tab was closed mid-file: served again on the next fetch
            self.close_connection = True
            self.server.log(f"{self.address_string()} closed the connection after {sent} of {size} bytes "
                            f"({e.strerror or type(e).__name__}); waiting for another fetch")
            return
        self.server.fetched = sent == size

    def _there(self) -> bool:
        """Whether the path still names a file (else 404: it was deleted before it was fetched)."""
        if os.path.isfile(self.server.path):
            return True
        self._gone()
        return False

    def _gone(self) -> None:
        """The file went away after the server started: nothing will ever be sent."""
        self._headers(404)
        self.server.gone = True

    def _local(self) -> bool:
        host = (self.headers.get("Host") or "").strip().lower()
        name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
        if name in LOCAL_HOSTS and port in ("", str(self.server.server_address[1])):
            return True
        self._headers(403)
        self.server.log(f"refused a request for Host {host!r}: only 127.0.0.1 and localhost are served")
        return False

    def _ours(self) -> bool:
        if not self._local():
            return False
        if urllib.parse.unquote_to_bytes(urllib.parse.urlsplit(self.path).path) == b"/" + os.fsencode(self.server.name):
            return True
        self._headers(404)
        return False

    def log_message(self, fmt: str, *args: object) -> None:
        self.server.log(f"{self.address_string()} {fmt % args}")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never keeps the command from exiting
    path: str
    name: str
    fd: int      # the file, opened once when the server starts
    size: int    # its size then: what every GET sends
    fetched: bool
    gone: bool
    log: Callable[[str], None]

    def handle_error(self, request: object, client_address: object) -> None:
        """A connection's failure (reset, timed out) in one line, not socketserver's traceback."""
        import sys

        e = sys.exc_info()[1]
        self.log(f"{client_address[0] if isinstance(client_address, tuple) else client_address}: the connection "
                 f"failed ({type(e).__name__}: {e})")


def serve(path: Union[str, "os.PathLike[str]"], port: int = DEFAULT_PORT, browser: bool = False,
          on_ready: Callable[[str], object] = print, log: Optional[Callable[[str], None]] = None) -> bool:
    """Serve ``path`` until it was fetched whole; Ctrl-C raises KeyboardInterrupt, a file
    deleted before it was fetched is a TraceError.

    ``on_ready(link)`` is called with the UI deep link once the server listens; ``log``
    gets one line per request.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TraceError(path, "no such file")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    try:
        server = _Server(("127.0.0.1", port), _Handler)
    except OSError as e:
        os.close(fd)
        raise OutputError(f"--port {port}: cannot listen on 127.0.0.1: {e.strerror or e}") from None
    server.path, server.name, server.fetched, server.gone = path, os.path.basename(path), False, False
    server.fd, server.size = fd, os.fstat(fd).st_size
    server.log = log or (lambda line: None)
    server.timeout = 0.2  # handle_request returns this often to look at fetched / gone
    try:
        with server:
            link = deep_link(server.server_address[1], server.name)
            on_ready(link)
            if browser:
                webbrowser.open(link)
            while not server.fetched:
                if server.gone:
                    raise TraceError(path, "the file was deleted (or became unreadable) before it was fetched")
                server.handle_request()
    finally:
        os.close(fd)
    return True
