"""sless runtime for python3.11 (runtime version v0.1.0).

Wraps the user's `handle(event)` in a small HTTP server, or calls it once in
job mode (SLESS_MODE=job). Stdlib only. The contract is in runtimes/README.md.
"""

import asyncio
import base64
import importlib
import inspect
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

# Exit codes shared by all runtimes.
EXIT_HANDLER_ERROR = 1
EXIT_BAD_EVENT = 2
EXIT_LOAD_ERROR = 3

# Longer than any sane proxy pool idle timeout, so the server never closes a
# pooled connection the proxy is about to reuse.
IDLE_TIMEOUT_SEC = 620
SHUTDOWN_GRACE_SEC = 10

# Response headers computed by the runtime itself; a handler's values are ignored.
MANAGED_HEADERS = {"content-length", "transfer-encoding", "connection"}
TOKEN_CHARS = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class ResponseError(Exception):
    """The handler returned something that cannot be sent."""


def error_message(exc):
    msg = str(exc)
    name = type(exc).__name__
    return f"{name}: {msg}" if msg else name


def to_json(value):
    # Compact, UTF-8, strict (NaN is not JSON): same output style as node/go.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _reject_constant(name):
    raise ValueError(f"not JSON: {name}")


def parse_json(text):
    """json.loads without the NaN/Infinity extensions (node/go reject them too)."""
    return json.loads(text, parse_constant=_reject_constant)


def trigger_properties(header):
    """The message properties an event trigger sends (base64 of JSON), or None."""
    if not header:
        return None
    try:
        value = parse_json(base64.b64decode(header, validate=True).decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def wrap_event(value):
    # The handler always gets a dict.
    return value if isinstance(value, dict) else {"body": value}


# ---------------------------------------------------------------- handler load

def load_handler():
    fn_dir = os.path.abspath(os.environ.get("SLESS_FUNCTION_DIR") or os.getcwd())
    entry = os.environ.get("SLESS_ENTRYPOINT") or "handler.handle"
    module_name, _, func_name = entry.rpartition(".")
    if not module_name or not func_name:
        raise RuntimeError(f"SLESS_ENTRYPOINT must be module.function, got {entry!r}")
    if not os.path.isdir(fn_dir):
        raise RuntimeError(f"function directory {fn_dir} does not exist")
    # Function dir first, then its pip --target deps; both before site-packages.
    sys.path[:0] = [fn_dir, os.path.join(fn_dir, ".deps")]
    # Relative file access in the handler resolves against its own directory.
    os.chdir(fn_dir)
    module = importlib.import_module(module_name)
    func = getattr(module, func_name, None)
    if func is None:
        raise RuntimeError(f"module {module_name!r} has no attribute {func_name!r}")
    if not callable(func):
        raise RuntimeError(f"{entry} is not callable")
    return func


async def _await(awaitable):
    return await awaitable


def call_handler(func, event):
    result = func(event)
    # Async handlers: each call gets its own event loop (one per request thread).
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    elif inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result


# ------------------------------------------------------------------- responses

def header_value(name, value):
    if isinstance(value, str):
        text = value
    else:
        text = to_json(value)
    if any(c in text for c in "\r\n\0"):
        raise ResponseError(f"invalid value for response header {name!r}")
    return text


def build_response(result):
    """Return (status, [(name, value)], body bytes) for a handler result."""
    status_code = result.get("statusCode") if isinstance(result, dict) else None
    is_int = isinstance(status_code, int) and not isinstance(status_code, bool)
    is_int = is_int or (isinstance(status_code, float) and status_code.is_integer())
    if not is_int:
        return 200, [("Content-Type", "application/json")], to_json(result).encode("utf-8", "replace")

    status = int(status_code)
    if not 200 <= status <= 599:
        raise ResponseError(f"invalid statusCode {status}: must be 200-599")
    raw_headers = result.get("headers") or {}
    if not isinstance(raw_headers, dict):
        raise ResponseError("headers must be an object")
    headers = []
    for name, value in raw_headers.items():
        if not isinstance(name, str) or not name or not set(name) <= TOKEN_CHARS:
            raise ResponseError(f"invalid response header name {name!r}")
        if name.lower() in MANAGED_HEADERS or value is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            headers.append((name, header_value(name, v)))
    has_type = any(n.lower() == "content-type" for n, _ in headers)

    body = result.get("body")
    if body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode("utf-8", "replace")
        default_type = "text/plain; charset=utf-8"
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
        default_type = "application/octet-stream"
    else:
        data = to_json(body).encode("utf-8", "replace")
        default_type = "application/json"
    if data and not has_type:
        headers.append(("Content-Type", default_type))
    return status, headers, data


# ------------------------------------------------------------------ HTTP mode

class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive (the proxy pools them); every response
    # therefore carries Content-Length.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body waits for the
    # peer's delayed ACK (about 40 ms per call on a kept-alive connection).
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT_SEC
    server_version = "sless-python"
    sys_version = ""
    func = None  # set by serve()

    # Any method name: BaseHTTPRequestHandler looks up do_<METHOD>.
    def __getattr__(self, name):
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    # No access log: stdout/stderr are the function's own logs.
    def log_request(self, code="-", size="-"):
        pass

    def log_message(self, format, *args):
        sys.stderr.write("sless-runtime: %s\n" % (format % args))

    def log_error(self, format, *args):
        # An idle keep-alive connection timing out is normal, not an error.
        if not format.startswith("Request timed out"):
            self.log_message(format, *args)

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Skip trailers up to the empty line.
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self._read_exactly(size))
                self.rfile.readline(3)  # CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self._read_exactly(length) if length > 0 else b""

    def _read_exactly(self, n):
        data = self.rfile.read(n)
        if len(data) < n:
            # Never call the handler with a truncated body.
            raise ConnectionAbortedError("client closed the connection mid-body")
        return data

    def _split_target(self):
        target = self.path
        if target.startswith("/"):
            # Not urlsplit: it would read "//a/b" as a host name.
            path, _, query = target.partition("?")
            return path.partition("#")[0], query
        parts = urlsplit(target)  # absolute-form request target
        return parts.path or "/", parts.query

    def _send(self, status, headers, data):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(data)

    def _send_json(self, status, value):
        self._send(status, [("Content-Type", "application/json")], to_json(value).encode("utf-8", "replace"))

    def _dispatch(self):
        path, query = self._split_target()
        body = self._read_body()  # always, so a kept-alive connection stays in sync
        if path == "/health" and self.command in ("GET", "HEAD"):
            self._send_json(200, {"status": "ok"})
            return
        with self.server.active_lock:
            self.server.active += 1
        try:
            try:
                event = self._build_event(body, path, query)
                result = call_handler(self.func, event)
                response = build_response(result)
            except BaseException as exc:  # incl. sys.exit(): the server keeps serving
                traceback.print_exc()
                response = (500, [("Content-Type", "application/json")],
                            to_json({"error": error_message(exc)}).encode("utf-8", "replace"))
            self._send(*response)
        finally:
            with self.server.active_lock:
                self.server.active -= 1
            sys.stdout.flush()
            sys.stderr.flush()

    def _build_event(self, body, path, query):
        text = body.decode("utf-8", "replace")
        if not text.strip():
            event = {}
        else:
            try:
                event = wrap_event(parse_json(text))
            except (ValueError, RecursionError):
                event = {"body": text}
        headers = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        first = {}
        for key, value in parse_qsl(query, keep_blank_values=True, errors="replace"):
            first.setdefault(key, value)
        event["_http"] = {
            "method": self.command,
            "path": path or "/",
            "query": first,
            "raw_query": query,
            "headers": headers,
        }
        amqp = trigger_properties(headers.get("x-sless-amqp"))
        if amqp is not None:
            event["_amqp"] = amqp
        return event


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler):
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        self.active = 0
        self.active_lock = threading.Lock()
        super().__init__(addr, handler)

    def handle_error(self, request, client_address):
        # A client that went away mid-request is not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(func):
    host = os.environ.get("SLESS_HOST") or "0.0.0.0"
    port = int(os.environ.get("PORT") or 8080)
    Handler.func = staticmethod(func)
    server = Server((host, port), Handler)

    def stop(signum, frame):
        # As PID 1 in a container SIGTERM has no default action: stop
        # accepting, let in-flight requests finish briefly, then exit.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    deadline = time.monotonic() + SHUTDOWN_GRACE_SEC
    while server.active and time.monotonic() < deadline:
        time.sleep(0.05)
    server.server_close()
    sys.stdout.flush()
    sys.stderr.flush()


# -------------------------------------------------------------------- job mode

class TrackingStdout:
    """Proxy for sys.stdout remembering whether the last write ended a line,
    so the result always lands on a line of its own."""

    def __init__(self, stream):
        self._stream = stream
        self.at_line_start = True

    def write(self, s):
        if s:
            self.at_line_start = s.endswith("\n")
        return self._stream.write(s)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def job_exit(stdout, value, code):
    if not stdout.at_line_start:
        stdout.write("\n")
    stdout.write(to_json(value) + "\n")
    stdout.flush()
    sys.stderr.flush()
    # Exit now even if the handler left non-daemon threads running.
    os._exit(code)


def run_job():
    stdout = TrackingStdout(sys.stdout)
    sys.stdout = stdout
    raw = os.environ.get("SLESS_EVENT_JSON") or "{}"
    try:
        event = wrap_event(parse_json(raw)) if raw.strip() else {}
    except (ValueError, RecursionError) as exc:
        msg = f"invalid SLESS_EVENT_JSON: {exc}"
        print(f"sless-runtime: {msg}", file=sys.stderr)
        job_exit(stdout, {"error": msg}, EXIT_BAD_EVENT)
    try:
        func = load_handler()
    except BaseException as exc:
        traceback.print_exc()
        msg = f"cannot load handler: {error_message(exc)}"
        print(f"sless-runtime: {msg}", file=sys.stderr)
        job_exit(stdout, {"error": msg}, EXIT_LOAD_ERROR)
    try:
        result = call_handler(func, event)
        to_json(result)  # not encodable counts as a handler error
    except BaseException as exc:  # sys.exit() in a handler is an error too
        traceback.print_exc()
        job_exit(stdout, {"error": error_message(exc)}, EXIT_HANDLER_ERROR)
    job_exit(stdout, result, 0)


def main():
    # Logs must show up at once and always be valid UTF-8.
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
    if (os.environ.get("SLESS_MODE") or "http") == "job":
        run_job()
        return
    try:
        func = load_handler()
    except BaseException as exc:
        traceback.print_exc()
        print(f"sless-runtime: cannot load handler: {error_message(exc)}", file=sys.stderr)
        sys.exit(EXIT_LOAD_ERROR)
    serve(func)


if __name__ == "__main__":
    main()
