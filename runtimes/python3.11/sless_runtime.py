"""sless runtime for python3.11 (runtime version v0.1.0).

Wraps the user's `handle(event)` in a small asyncio HTTP/1.1 server, or calls it
once in job mode (SLESS_MODE=job). Stdlib only. The contract is in runtimes/README.md.
"""

import asyncio
import base64
import contextvars
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
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
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
REASONS = {s.value: s.phrase for s in HTTPStatus}
TOKEN_CHARS = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class ResponseError(Exception):
    """The handler returned something that cannot be sent."""


def error_message(exc):
    msg = str(exc)
    name = type(exc).__name__
    return f"{name}: {msg}" if msg else name


# ---------------------------------------------------------------- call logs
# Each line a call prints goes out as "[<request id>] line", lines printed outside a
# call as "[-] line": sless shows a call's lines with its record (runtimes/README.md).

REQUEST_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
OUTSIDE_CALL = "[-] "
# An unended line longer than this goes out cut (sless keeps 16 KiB of a line).
MAX_PENDING_CHARS = 16384

# The tag of the call running in this thread or task.
current_call = contextvars.ContextVar("sless_call", default=OUTSIDE_CALL)


def call_tag(request_id):
    if request_id and len(request_id) <= 64 and set(request_id) <= REQUEST_ID_CHARS:
        return f"[{request_id}] "
    return OUTSIDE_CALL


class CallTaggedStream:
    """sys.stdout or sys.stderr in HTTP mode: every line goes out whole behind the tag
    of the call that printed it, even when calls in threads and tasks print at once.
    A line longer than MAX_PENDING_CHARS goes out cut there, and its rest is dropped
    (sless keeps 16 KiB of a line), so an endless line holds no memory."""

    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()
        self.pending = {}  # tag -> the start of a line not ended yet
        self.cut = set()  # tags whose current line went out cut: its rest is dropped

    def write(self, text):
        tag = current_call.get()
        with self.lock:
            if tag in self.cut:
                end = text.find("\n")
                if end < 0:
                    return len(text)
                self.cut.discard(tag)
                text = text[end + 1:]
            *lines, rest = (self.pending.pop(tag, "") + text).split("\n")
            if len(rest) > MAX_PENDING_CHARS:
                lines.append(rest[:MAX_PENDING_CHARS])
                self.cut.add(tag)
                rest = ""
            if lines:
                self.stream.write("".join(f"{tag}{line}\n" for line in lines))
            if rest:
                self.pending[tag] = rest
        return len(text)

    def end_call(self, tag):
        """The call is over: its unended line goes out."""
        with self.lock:
            self.cut.discard(tag)
            rest = self.pending.pop(tag, "")
            if rest:
                self.stream.write(f"{tag}{rest}\n")
        self.stream.flush()

    def drain(self):
        with self.lock:
            self.stream.write("".join(f"{tag}{rest}\n" for tag, rest in self.pending.items()))
            self.pending.clear()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def end_call_logs(tag):
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, CallTaggedStream):
            stream.end_call(tag)
        else:
            stream.flush()


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
    """One call in job mode (HTTP mode runs async handlers on its own loop)."""
    result = func(event)
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
    try:
        text.encode("latin-1")  # what HTTP/1.1 header bytes can carry
    except UnicodeEncodeError:
        raise ResponseError(f"response header {name!r} is not Latin-1 text") from None
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
#
# One asyncio loop accepts connections, parses HTTP/1.1 and writes responses; sync
# handlers run in a bounded thread pool, async handlers as tasks on that same loop
# (no event loop per call). Requests on one connection are answered in order.

# Sync handlers running at once; more requests wait for a free thread.
HANDLER_THREADS = 64
# Request line plus headers, and how many header lines (431 beyond either).
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
# The proxy's default limit: a body the platform would never forward gets 413.
MAX_BODY_BYTES = 256 * 1024 * 1024
# Bytes read ahead of a request still being handled (pipelining) before reading pauses.
READ_AHEAD_BYTES = 1024 * 1024
# accept() queue: a burst of new connections must not overflow into SYN retries.
LISTEN_BACKLOG = 1024
IDLE_SWEEP_SEC = 30

HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
TOKEN_BYTES = frozenset(ord(c) for c in TOKEN_CHARS)
JSON_HEADERS = [("Content-Type", "application/json")]
END_KEEP_ALIVE = b"\r\n"
END_CLOSE = b"Connection: close\r\n\r\n"


class BadRequest(Exception):
    """The request cannot be read: answered with `status` and the connection closed."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class RequestHead:
    __slots__ = ("method", "target", "version", "headers", "keep_alive", "chunked", "length", "expect_continue")


def find_head_end(buf):
    """(index where the head ends, length of the blank line) or (-1, 0)."""
    crlf = buf.find(b"\r\n\r\n")
    lf = buf.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    if lf >= 0:
        return lf, 2
    return -1, 0


def parse_head(raw):
    lines = raw.split(b"\n")
    parts = lines[0].rstrip(b"\r").split(b" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= TOKEN_BYTES or not parts[1]:
        raise BadRequest(400, "malformed request line")
    version = parts[2]
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        if version.startswith(b"HTTP/") and version[5:6].isdigit() and version[5:6] != b"0":
            raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are served")
        raise BadRequest(400, "malformed request line")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} request headers")
    pairs = []
    for line in lines[1:]:
        line = line.rstrip(b"\r")
        if line[:1] in (b" ", b"\t"):  # obsolete line folding: continues the last value
            if not pairs:
                raise BadRequest(400, "malformed request header")
            name, value = pairs[-1]
            pairs[-1] = (name, value + " " + line.strip(b" \t").decode("latin-1"))
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or not set(name) <= TOKEN_BYTES:
            raise BadRequest(400, "malformed request header")
        pairs.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    headers = {}
    for name, value in pairs:
        headers[name] = f"{headers[name]}, {value}" if name in headers else value

    head = RequestHead()
    head.method = parts[0].decode("latin-1")
    head.target = parts[1].decode("latin-1")
    head.version = version
    head.headers = headers
    connection = headers.get("connection", "").lower()
    if version == b"HTTP/1.1":
        head.keep_alive = "close" not in connection
    else:
        head.keep_alive = "keep-alive" in connection
    head.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    head.length = 0
    if not head.chunked and "content-length" in headers:
        values = {v.strip() for v in headers["content-length"].split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise BadRequest(400, "invalid Content-Length")
        head.length = int(values.pop())
        if head.length > MAX_BODY_BYTES:
            raise BadRequest(413, f"request body larger than {MAX_BODY_BYTES} bytes")
    head.expect_continue = version == b"HTTP/1.1" and headers.get("expect", "").lower() == "100-continue"
    return head


class ChunkedBody:
    """A chunked request body read piece by piece from the connection buffer."""

    __slots__ = ("chunks", "total", "size", "trailers")

    def __init__(self):
        self.chunks = []
        self.total = 0
        self.size = None
        self.trailers = False

    def feed(self, buf):
        """Consumes what it can from `buf`; the whole body once it is complete, else None."""
        while True:
            if self.trailers or self.size is None:
                eol = buf.find(b"\n")
                if eol < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        raise BadRequest(400, "malformed chunked body")
                    return None
                line = bytes(buf[:eol]).rstrip(b"\r")
                del buf[:eol + 1]
                if self.trailers:
                    if not line:
                        return b"".join(self.chunks)
                    continue
                size = line.split(b";", 1)[0].strip()
                if not size or not set(size) <= HEX_DIGITS:
                    raise BadRequest(400, "malformed chunked body")
                size = int(size, 16)
                if size == 0:
                    self.trailers = True
                    continue
                self.total += size
                if self.total > MAX_BODY_BYTES:
                    raise BadRequest(413, f"request body larger than {MAX_BODY_BYTES} bytes")
                self.size = size
            end = self.size
            if buf[end:end + 2] == b"\r\n":
                skip = 2
            elif buf[end:end + 1] == b"\n":
                skip = 1
            elif len(buf) < end + 2:
                return None
            else:
                raise BadRequest(400, "malformed chunked body")
            self.chunks.append(bytes(buf[:end]))
            del buf[:end + skip]
            self.size = None


def split_target(target):
    if target.startswith("/"):
        # Not urlsplit: it would read "//a/b" as a host name.
        path, _, query = target.partition("?")
        return path.partition("#")[0], query
    parts = urlsplit(target)  # absolute-form request target
    return parts.path or "/", parts.query


def build_event(head, body):
    text = body.decode("utf-8", "replace")
    if not text.strip():
        event = {}
    else:
        try:
            event = wrap_event(parse_json(text))
        except (ValueError, RecursionError):
            event = {"body": text}
    path, query = split_target(head.target)
    first = {}
    for key, value in parse_qsl(query, keep_blank_values=True, errors="replace"):
        first.setdefault(key, value)
    event["_http"] = {
        "method": head.method,
        "path": path or "/",
        "query": first,
        "raw_query": query,
        "headers": dict(head.headers),
    }
    amqp = trigger_properties(head.headers.get("x-sless-amqp"))
    if amqp is not None:
        event["_amqp"] = amqp
    request_id = head.headers.get("x-request-id")
    if request_id:
        event["_request_id"] = request_id
    return event


_date = [0, ""]
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date():
    # One formatting per second; a race between threads only formats twice. Not
    # email.utils: importing it costs a few ms of every cold start.
    now = int(time.time())
    if _date[0] != now:
        t = time.gmtime(now)
        _date[1] = (f"{WEEKDAYS[t.tm_wday]}, {t.tm_mday:02d} {MONTHS[t.tm_mon - 1]} {t.tm_year} "
                    f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")
        _date[0] = now
    return _date[1]


def render(status, headers, data, method):
    """Status line and headers (without the blank line that ends them), and the body."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nServer: sless-python\r\nDate: {http_date()}\r\n"]
    for name, value in headers:
        lines.append(f"{name}: {value}\r\n")
    if status in (204, 304):
        data = b""
    else:
        lines.append(f"Content-Length: {len(data)}\r\n")
        if method == "HEAD":
            data = b""
    return "".join(lines).encode("latin-1"), data


def error_response(exc):
    """A 500 for a failed call; call inside the `except` so the traceback is printed."""
    traceback.print_exc()
    return 500, JSON_HEADERS, to_json({"error": error_message(exc)}).encode("utf-8", "replace")


def result_response(result, method):
    try:
        return render(*build_response(result), method)
    except BaseException as exc:  # not encodable, invalid shape
        return render(*error_response(exc), method)


def flush_logs():
    """Before exiting: every unended line goes out."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, CallTaggedStream):
            stream.drain()
        stream.flush()


class Server:
    """What all connections share."""

    def __init__(self, func, loop):
        self.func = func
        self.is_async = inspect.iscoroutinefunction(func)
        self.loop = loop
        self.pool = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="sless-handler")
        self.connections = set()
        self.tasks = set()
        self.active = 0
        self.closing = False


class Connection(asyncio.Protocol):
    def __init__(self, server):
        self.server = server
        self.transport = None
        self.buf = bytearray()
        self.head = None
        self.chunked = None
        self.busy = False
        self.keep_alive = True
        self.paused = False
        self.last_active = time.monotonic()

    def connection_made(self, transport):
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc):
        self.server.connections.discard(self)
        self.transport = None

    def data_received(self, data):
        self.buf += data
        self.last_active = time.monotonic()
        if not self.busy:
            self.next_request()
        elif len(self.buf) > READ_AHEAD_BYTES and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def next_request(self):
        if self.transport is None or self.busy:
            return
        try:
            request = self.read_request()
        except BadRequest as exc:
            self.busy = True
            self.keep_alive = False
            self.send(*render(exc.status, JSON_HEADERS, to_json({"error": str(exc)}).encode(), "GET"))
            return
        if request is not None:
            self.dispatch(*request)

    def read_request(self):
        """The next complete (head, body) in the buffer, or None."""
        buf = self.buf
        head = self.head
        if head is None:
            end, blank = find_head_end(buf)
            if end < 0 or end > MAX_HEAD_BYTES:
                if len(buf) > MAX_HEAD_BYTES:
                    raise BadRequest(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
                return None
            head = self.head = parse_head(bytes(buf[:end]))
            del buf[:end + blank]
            self.chunked = ChunkedBody() if head.chunked else None
            if head.expect_continue and (head.chunked or len(buf) < head.length):
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self.chunked is not None:
            body = self.chunked.feed(buf)
            if body is None:
                return None
        else:
            if len(buf) < head.length:
                return None
            body = bytes(buf[:head.length])
            del buf[:head.length]
        self.head = self.chunked = None
        return head, body

    def dispatch(self, head, body):
        self.busy = True
        self.keep_alive = head.keep_alive
        server = self.server
        if head.method in ("GET", "HEAD") and split_target(head.target)[0] == "/health":
            self.send(*render(200, JSON_HEADERS, b'{"status":"ok"}', head.method))
            return
        server.active += 1
        tag = call_tag(head.headers.get("x-request-id"))
        if server.is_async:
            task = server.loop.create_task(self.call_async(tag, head, body))
            server.tasks.add(task)
            task.add_done_callback(server.tasks.discard)
        else:
            server.pool.submit(self.call_sync, tag, head, body)

    def call_sync(self, tag, head, body):
        """In a pool thread: the handler, its response rendered, then back to the loop."""
        token = current_call.set(tag)
        try:
            result = self.server.func(build_event(head, body))
        except BaseException as exc:  # incl. sys.exit(): the server keeps serving
            response = render(*error_response(exc), head.method)
        else:
            if inspect.isawaitable(result):  # a sync callable that returned a coroutine
                self.server.loop.call_soon_threadsafe(self.await_result, tag, result, head.method)
                return
            response = result_response(result, head.method)
        finally:
            current_call.reset(token)
        end_call_logs(tag)
        self.server.loop.call_soon_threadsafe(self.finish, *response)

    def await_result(self, tag, awaitable, method):
        task = self.server.loop.create_task(self.call_async(tag, None, None, awaitable, method))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def call_async(self, tag, head, body, awaitable=None, method=None):
        current_call.set(tag)  # in this task's own context
        method = method or head.method
        try:
            result = await (awaitable if awaitable is not None else self.server.func(build_event(head, body)))
        except asyncio.CancelledError:
            raise  # shutdown after the grace period
        except BaseException as exc:  # incl. sys.exit(): the server keeps serving
            response = render(*error_response(exc), method)
        else:
            response = result_response(result, method)
        end_call_logs(tag)
        self.finish(*response)

    def finish(self, head_bytes, data):
        self.server.active -= 1
        self.send(head_bytes, data)

    def send(self, head_bytes, data):
        transport = self.transport
        self.busy = False
        if transport is None or transport.is_closing():
            return
        close = not self.keep_alive or self.server.closing
        head_bytes += END_CLOSE if close else END_KEEP_ALIVE
        if len(data) < 65536:
            transport.write(head_bytes + data)  # one segment for small answers
        else:
            transport.write(head_bytes)
            transport.write(data)
        self.last_active = time.monotonic()
        if close:
            transport.close()
            return
        if self.paused:
            self.paused = False
            transport.resume_reading()
        if self.buf:
            self.server.loop.call_soon(self.next_request)  # pipelined: no recursion


def announce_ready():
    """Tells the runner the server listens (a byte on SLESS_READY_FD), so it need not poll."""
    fd = os.environ.pop("SLESS_READY_FD", "")
    if fd.isdigit():
        try:
            os.write(int(fd), b"1")
            os.close(int(fd))  # the handler's own child processes must not hold it
        except OSError:
            pass


async def run_server(func, sock):
    """Serves until SIGTERM/SIGINT; True when no request was left unfinished."""
    loop = asyncio.get_running_loop()
    server = Server(func, loop)
    listener = await loop.create_server(lambda: Connection(server), sock=sock, backlog=LISTEN_BACKLOG)
    announce_ready()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        # As PID 1 in a container SIGTERM has no default action.
        loop.add_signal_handler(signum, stop.set)

    async def close_idle():
        while True:
            await asyncio.sleep(IDLE_SWEEP_SEC)
            limit = time.monotonic() - IDLE_TIMEOUT_SEC
            for conn in list(server.connections):
                if not conn.busy and conn.last_active < limit:
                    conn.transport.close()

    sweeper = loop.create_task(close_idle())
    await stop.wait()
    # Stop accepting, close idle connections, let in-flight requests finish briefly.
    sweeper.cancel()
    server.closing = True
    listener.close()
    for conn in list(server.connections):
        if not conn.busy:
            conn.transport.close()
    deadline = time.monotonic() + SHUTDOWN_GRACE_SEC
    while server.active and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    server.pool.shutdown(wait=not server.active)
    return not server.active


def listen_socket():
    """The listening socket sless made for this instance (SLESS_LISTEN_FD), else PORT."""
    fd = os.environ.pop("SLESS_LISTEN_FD", "")
    if fd.isdigit():
        try:
            sock = socket.socket(fileno=int(fd))
        except OSError as exc:
            print(f"sless-runtime: no listening socket on descriptor {fd}: {exc}", file=sys.stderr)
            sys.exit(1)
        sock.set_inheritable(False)  # not for the handler's own child processes
        return sock
    host = os.environ.get("SLESS_HOST") or "0.0.0.0"
    port = int(os.environ.get("PORT") or 8080)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        print(f"sless-runtime: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        sys.exit(1)


def await_function_dir():
    """A pre-started runtime (SLESS_STANDBY=1) has loaded and holds its port; when a
    function needs it, the runner sends one JSON line on stdin: the function's
    directory and its env ({"dir": ..., "env": {...}}). Its ready byte says it has
    loaded (the runner binds a loaded standby first); bound, it serves unannounced."""
    if os.environ.pop("SLESS_STANDBY", "") != "1":
        return
    announce_ready()
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)  # let go unused
    try:
        bound = json.loads(line)
        os.environ.update(bound["env"])
        os.environ["SLESS_FUNCTION_DIR"] = bound["dir"]
    except (ValueError, KeyError, TypeError) as exc:
        print(f"sless-runtime: bad standby message on stdin: {exc}", file=sys.stderr)
        sys.exit(EXIT_LOAD_ERROR)


def serve(func, sock):
    finished = asyncio.run(run_server(func, sock))
    flush_logs()
    if not finished:
        os._exit(0)  # a handler still running past the grace must not hold the exit


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
    sys.stdout = CallTaggedStream(sys.stdout)
    sys.stderr = CallTaggedStream(sys.stderr)
    sock = listen_socket()
    await_function_dir()
    try:
        func = load_handler()
    except BaseException as exc:
        traceback.print_exc()
        print(f"sless-runtime: cannot load handler: {error_message(exc)}", file=sys.stderr)
        sys.exit(EXIT_LOAD_ERROR)
    serve(func, sock)


if __name__ == "__main__":
    main()
