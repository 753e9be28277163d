#!/usr/bin/env python3
"""Manual tests for the sless runtime wrappers (stdlib only).

    python3 runtimes/test_runtimes.py [python3.11] [nodejs20] [go1.23]

For each runtime: writes a test function into a temp dir, starts the wrapper
on a free port (and on an inherited Unix listener, as sless starts it) and checks
the HTTP contract and job mode (runtimes/README.md).
Go is skipped with a note when `go` is not installed. Ends with
"N passed, M failed"; exits 1 on any failure.
"""

import base64
import http.client
import json
import os
import shutil
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

PY_HANDLER = r'''
import asyncio
import os
import sys
import threading
import time

import sless_testdep  # from .deps

# /gather answers once GATHER calls run at the same time (a broken barrier is a 500).
GATHER = 64
BARRIER = threading.Barrier(GATHER, timeout=20)
ARRIVED = []
LOOPS = set()  # strong references: a freed loop's id could be reused


def handle(event):
    http = event.get("_http")
    action = http["path"] if http else event.get("action", "")
    if action == "/status":
        return {"statusCode": 201, "headers": {"X-Test": "yes", "Set-Cookie": ["a=1", "b=2"]}, "body": "created"}
    if action == "/status-json":
        return {"statusCode": 202, "body": {"ok": True}}
    if action == "/status-204":
        return {"statusCode": 204}
    if action in ("/boom", "fail"):
        raise RuntimeError("boom")
    if action == "/none":
        return None
    if action == "/print":
        print("hello from handler")
        return "printed"
    if action == "/sleep":
        time.sleep(0.5)
        return "slept"
    if action == "/slow":
        print("slow call started")
        time.sleep(1)
        return "slow done"
    if action == "/gather":
        BARRIER.wait()
        return "met"
    if action == "/not-latin1":
        return {"statusCode": 200, "headers": {"X-Price": "5 \u20ac"}, "body": "x"}
    if action == "/dep":
        return sless_testdep.VALUE
    if action == "/bound-env":
        return os.environ.get("SLESS_TEST_BOUND")
    if action == "job":
        print("job output", end="")  # no newline: the result must still get its own line
        return {"x": event.get("x")}
    return event


async def ahandle(event):
    await asyncio.sleep(0.01)
    return {"async": True, "event": event}


async def aserve(event):
    loop = asyncio.get_running_loop()
    LOOPS.add(loop)
    action = event["_http"]["path"]
    if action == "/gather":
        arrived = loop.create_future()
        ARRIVED.append(arrived)
        if len(ARRIVED) == GATHER:
            for f in ARRIVED:
                f.set_result(None)
        await asyncio.wait_for(arrived, 20)
        return "met"
    if action == "/boom":
        raise ValueError("async boom")
    if action == "/exit":
        sys.exit(3)
    return {"async": True, "loops": len(LOOPS), "threads": threading.active_count()}
'''

JS_HANDLER = r'''
const dep = require('sless-testdep'); // from node_modules

// /gather answers once 64 calls are pending at the same time.
const arrived = [];

exports.handle = async (event) => {
  const action = event._http ? event._http.path : (event.action || '');
  switch (action) {
    case '/status':
      return { statusCode: 201, headers: { 'X-Test': 'yes', 'Set-Cookie': ['a=1', 'b=2'] }, body: 'created' };
    case '/status-json':
      return { statusCode: 202, body: { ok: true } };
    case '/status-204':
      return { statusCode: 204 };
    case '/boom':
    case 'fail':
      throw new Error('boom');
    case '/none':
      return undefined;
    case '/print':
      console.log('hello from handler');
      return 'printed';
    case '/sleep':
      await new Promise((r) => setTimeout(r, 500));
      return 'slept';
    case '/gather':
      await new Promise((resolve, reject) => {
        arrived.push(resolve);
        if (arrived.length === 64) arrived.forEach((r) => r());
        setTimeout(() => reject(new Error('64 calls never ran at once')), 20000).unref();
      });
      return 'met';
    case '/dep':
      return dep.VALUE;
    case '/bound-env':
      return process.env.SLESS_TEST_BOUND;
    case 'job':
      process.stdout.write('job output'); // no newline
      setInterval(() => {}, 1000); // a leftover timer must not keep the job alive
      return { x: event.x };
    default:
      return event;
  }
};

exports.syncHandle = (event) => ({ sync: true, event });
'''

GO_HANDLER = r'''
package handler

import (
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"example.com/testfn/util"
)

// /gather answers once 64 calls run at the same time.
var (
	mu      sync.Mutex
	arrived int
	all     = make(chan struct{})
)

func Handle(event map[string]any) (any, error) {
	action, _ := event["action"].(string)
	if h, ok := event["_http"].(map[string]any); ok {
		action, _ = h["path"].(string)
	}
	switch action {
	case "/status":
		return map[string]any{"statusCode": 201, "headers": map[string]any{"X-Test": "yes", "Set-Cookie": []string{"a=1", "b=2"}}, "body": "created"}, nil
	case "/status-json":
		return map[string]any{"statusCode": 202, "body": map[string]any{"ok": true}}, nil
	case "/status-204":
		return map[string]any{"statusCode": 204}, nil
	case "/boom", "fail":
		return nil, errors.New("boom")
	case "/panic":
		panic("kaboom")
	case "/none":
		return nil, nil
	case "/print":
		fmt.Println("hello from handler")
		return "printed", nil
	case "/print-unended":
		fmt.Print("unended ")
		fmt.Fprint(os.Stderr, "on stderr")
		log.Print("from log")
		return "printed", nil
	case "/sleep":
		time.Sleep(500 * time.Millisecond)
		return "slept", nil
	case "/gather":
		mu.Lock()
		arrived++
		if arrived == 64 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return "met", nil
		case <-time.After(20 * time.Second):
			return nil, errors.New("64 calls never ran at once")
		}
	case "/dep":
		return util.Value, nil
	case "job":
		fmt.Print("job output") // no newline
		return map[string]any{"x": event["x"]}, nil
	}
	return event, nil
}
'''

FILES = {
    "python3.11": {
        "handler.py": PY_HANDLER,
        ".deps/sless_testdep.py": "VALUE = 'dep-ok'\n",
    },
    "nodejs20": {
        "handler.js": JS_HANDLER,
        "node_modules/sless-testdep/index.js": "exports.VALUE = 'dep-ok';\n",
        "node_modules/sless-testdep/package.json": '{"name": "sless-testdep", "version": "1.0.0", "main": "index.js"}\n',
    },
    "go1.23": {
        "handler.go": GO_HANDLER,
        # A user go.mod with a local sub-package: the module path must survive.
        "go.mod": "module example.com/testfn\n\ngo 1.19\n",
        "util/util.go": 'package util\n\nconst Value = "dep-ok"\n',
    },
}

passed = 0
failed = 0


def report(runtime, name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {runtime}: {name}")
    else:
        failed += 1
        print(f"FAIL {runtime}: {name}: {detail}")
    sys.stdout.flush()


def check(runtime, name, fn):
    try:
        fn()
        report(runtime, name, True)
    except Exception as exc:  # one failing check must not stop the others
        report(runtime, name, False, f"{type(exc).__name__}: {exc}")


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_files(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text.lstrip("\n"))


def request(port, method, path, body=None, headers=None, conn=None):
    own = conn is None
    if own:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp, data
    finally:
        if own:
            conn.close()


def request_json(port, method, path, body=None, headers=None):
    resp, data = request(port, method, path, body, headers)
    return resp, json.loads(data)


def raw_exchange(port, data, until=None):
    """Sends raw bytes; reads until `until` is seen or the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while until is None or until not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def status_of(raw):
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None


def gather(port, n=64):
    """n calls to /gather, each on its own connection, all at once; their statuses."""
    results = []

    def one():
        try:
            resp, data = request(port, "GET", "/gather")
            results.append((resp.status, data))
        except OSError as exc:
            results.append((None, str(exc)))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class Runtime:
    """How to start one runtime: argv, plus env for the function dir."""

    def __init__(self, name, argv, fn_dir, tmp):
        self.name, self.argv, self.fn_dir, self.tmp = name, argv, fn_dir, tmp

    def env(self, **extra):
        env = dict(os.environ)
        for k in ("SLESS_MODE", "SLESS_EVENT_JSON", "SLESS_ENTRYPOINT", "SLESS_HOST", "PORT"):
            env.pop(k, None)
        env["SLESS_FUNCTION_DIR"] = self.fn_dir
        env.update(extra)
        return env

    def job(self, event_json, **extra):
        env = self.env(SLESS_MODE="job", **extra)
        if event_json is not None:
            env["SLESS_EVENT_JSON"] = event_json
        return subprocess.run(self.argv, env=env, capture_output=True, text=True, timeout=60, cwd=self.tmp)


def prepare(name, tmp):
    fn_dir = os.path.join(tmp, "function")
    write_files(fn_dir, FILES[name])
    if name == "python3.11":
        return Runtime(name, [sys.executable, os.path.join(HERE, "python3.11", "sless_runtime.py")], fn_dir, tmp)
    if name == "nodejs20":
        return Runtime(name, ["node", os.path.join(HERE, "nodejs20", "sless_runtime.js")], fn_dir, tmp)
    binary = os.path.join(tmp, "bin", "function")
    build = subprocess.run(["sh", os.path.join(HERE, "go1.23", "build.sh"), fn_dir, binary],
                           capture_output=True, text=True, timeout=600)
    if build.returncode != 0:
        raise RuntimeError(f"build.sh failed:\n{build.stdout}{build.stderr}")
    return Runtime(name, [binary], fn_dir, tmp)


def start_server(rt, port, **extra):
    out = open(os.path.join(rt.tmp, f"stdout-{port}.log"), "w+")
    err = open(os.path.join(rt.tmp, f"stderr-{port}.log"), "w+")
    proc = subprocess.Popen(rt.argv, env=rt.env(PORT=str(port), SLESS_HOST="127.0.0.1", **extra),
                            stdout=out, stderr=err, cwd=rt.tmp)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            err.seek(0)
            raise RuntimeError(f"server exited with {proc.returncode}: {err.read()[-2000:]}")
        try:
            resp, _ = request(port, "GET", "/health")
            if resp.status == 200:
                return proc, out, err
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become healthy in 30 s")


def test_http(rt):
    port = free_port()
    proc, out, err = start_server(rt, port)
    n = rt.name
    try:
        def health():
            resp, data = request(port, "GET", "/health")
            expect(resp.status == 200, f"status {resp.status}")
            expect(resp.getheader("Content-Type", "").startswith("application/json"), resp.getheader("Content-Type"))
            expect(json.loads(data) == {"status": "ok"}, data)

        def echo():
            body = json.dumps({"k": "v", "n": [1, 2], "_http": "overwritten"})
            resp, ev = request_json(port, "POST", "/a/b?x=1&y=two+words&x=3&e=%C3%A9", body,
                                    {"Content-Type": "application/json", "X-Custom": "abc",
                                     "X-Request-Id": "call-42"})
            expect(resp.status == 200, f"status {resp.status}")
            expect(ev["k"] == "v" and ev["n"] == [1, 2], ev)
            expect(ev.get("_request_id") == "call-42", ev)
            h = ev["_http"]
            expect(h["method"] == "POST", h)
            expect(h["path"] == "/a/b", h["path"])
            expect(h["query"] == {"x": "1", "y": "two words", "e": "é"}, h["query"])
            expect(h["raw_query"] == "x=1&y=two+words&x=3&e=%C3%A9", h["raw_query"])
            expect(h["headers"].get("x-custom") == "abc", h["headers"])
            expect(h["headers"].get("content-type") == "application/json", h["headers"])
            expect("host" in h["headers"], h["headers"])

        def root_and_empty():
            resp, ev = request_json(port, "GET", "/")
            expect(resp.status == 200, f"status {resp.status}")
            expect(set(ev) == {"_http"}, ev)
            expect(ev["_http"]["path"] == "/" and ev["_http"]["query"] == {} and ev["_http"]["raw_query"] == "", ev)

        def non_json():
            _, ev = request_json(port, "PUT", "/t", "hello world", {"Content-Type": "text/plain"})
            expect(ev["body"] == "hello world" and ev["_http"]["method"] == "PUT", ev)
            _, ev = request_json(port, "POST", "/t", "[1, 2]")
            expect(ev["body"] == [1, 2], ev)
            _, ev = request_json(port, "POST", "/t", "NaN")
            expect(ev["body"] == "NaN", ev)

        def status_shape():
            resp, data = request(port, "GET", "/status")
            expect(resp.status == 201, f"status {resp.status}")
            expect(resp.getheader("X-Test") == "yes", resp.getheaders())
            expect(data == b"created", data)
            expect(resp.getheader("Content-Type", "").startswith("text/plain"), resp.getheader("Content-Type"))
            cookies = [v for k, v in resp.getheaders() if k.lower() == "set-cookie"]
            expect(sorted(cookies) == ["a=1", "b=2"], cookies)
            resp, data = request(port, "GET", "/status-json")
            expect(resp.status == 202 and json.loads(data) == {"ok": True}, (resp.status, data))
            expect(resp.getheader("Content-Type", "").startswith("application/json"), resp.getheader("Content-Type"))
            resp, data = request(port, "GET", "/status-204")
            expect(resp.status == 204 and data == b"", (resp.status, data))

        def exception_then_ok():
            resp, data = request(port, "POST", "/boom", "{}")
            expect(resp.status == 500, f"status {resp.status}")
            msg = json.loads(data)["error"]
            want = {"python3.11": "RuntimeError: boom", "nodejs20": "Error: boom", "go1.23": "boom"}[n]
            expect(msg == want, msg)
            resp, data = request(port, "GET", "/after")
            expect(resp.status == 200, f"status {resp.status}")
            if n == "go1.23":
                resp, data = request(port, "GET", "/panic")
                expect(resp.status == 500 and "kaboom" in json.loads(data)["error"], (resp.status, data))
                resp, _ = request(port, "GET", "/after")
                expect(resp.status == 200, f"status {resp.status}")

        def none_is_null():
            resp, data = request(port, "GET", "/none")
            expect(resp.status == 200 and data == b"null", (resp.status, data))

        def keep_alive():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                socks = []
                for path in ("/k1", "/boom", "/status", "/k2"):
                    resp, _ = request(port, "GET", path, conn=conn)
                    expect(not resp.will_close, f"{path}: server closes the connection")
                    socks.append(conn.sock)
                expect(all(s is socks[0] for s in socks), "connection was not reused")
            finally:
                conn.close()

        def chunked_body():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("POST", "/chunked", body=iter([b'{"a":', b' "chunk"}']),
                             headers={"Content-Type": "application/json"}, encode_chunked=True)
                resp = conn.getresponse()
                ev = json.loads(resp.read())
                expect(ev.get("a") == "chunk", ev)
                resp, _ = request(port, "GET", "/again", conn=conn)  # connection still in sync
                expect(resp.status == 200, f"status {resp.status}")
            finally:
                conn.close()

        def head():
            resp, data = request(port, "HEAD", "/h")
            expect(resp.status == 200 and data == b"", (resp.status, data))

        def concurrency():
            results = []

            def one():
                results.append(request(port, "GET", "/sleep")[0].status)

            t0 = time.time()
            threads = [threading.Thread(target=one) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.time() - t0
            expect(results == [200] * 4, results)
            expect(took < 1.6, f"4 x 0.5 s requests took {took:.2f} s")

        def dependency():
            _, value = request_json(port, "GET", "/dep")
            expect(value == "dep-ok", value)

        def logs_only_handler_output():
            # Each runtime tags a call's lines with its request id (runtimes/README.md).
            request(port, "GET", "/print", headers={"X-Request-Id": "call-7"})
            time.sleep(0.2)
            out.seek(0)
            lines = [line for line in out.read().splitlines() if line]
            expect(lines and set(lines) == {"[call-7] hello from handler"}, lines)

        def event_trigger_properties():
            # The dispatcher passes a message's AMQP properties as base64 JSON; the
            # handler sees them as `_amqp`. Anything unreadable is left out.
            props = {"queue": "orders", "message_id": "m-1", "delivery_count": 3,
                     "headers": {"x-sless-attempts": 2}, "redelivered": True}
            encoded = base64.b64encode(json.dumps(props).encode()).decode()
            _, ev = request_json(port, "POST", "/amqp", "{}", {"X-Sless-Amqp": encoded})
            expect(ev.get("_amqp") == props, ev)
            for bad in ("not base64!", base64.b64encode(b"[1, 2]").decode(), base64.b64encode(b"{nope").decode()):
                _, ev = request_json(port, "POST", "/amqp", "{}", {"X-Sless-Amqp": bad})
                expect("_amqp" not in ev, (bad, ev))

        def sixty_four_at_once():
            results = gather(port)
            expect(results == [(200, b'"met"')] * 64, {r for r in results if r != (200, b'"met"')})

        for name, fn in [("health", health), ("JSON echo with sub-path, query, headers", echo),
                         ("root path, empty body", root_and_empty), ("non-JSON and non-object bodies", non_json),
                         ("statusCode/headers/body shape", status_shape),
                         ("exception -> 500, then 200", exception_then_ok), ("None -> null", none_is_null),
                         ("keep-alive", keep_alive), ("chunked request body", chunked_body), ("HEAD", head),
                         ("concurrent requests", concurrency), ("dependency dir", dependency),
                         ("stdout carries only handler output", logs_only_handler_output),
                         ("event trigger properties as _amqp", event_trigger_properties),
                         ("64 concurrent calls run at once", sixty_four_at_once)]:
            check(n, name, fn)
        if n == "python3.11":
            for name, fn in python_http_checks(port, proc, out):
                check(n, name, fn)
        if n == "go1.23":
            for name, fn in go_http_checks(port, out, err):
                check(n, name, fn)

        def sigterm():
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
            expect(code == 0, f"exit code {code}")

        if n != "python3.11":  # python: "SIGTERM lets the in-flight call finish"
            check(n, "SIGTERM exits 0", sigterm)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()


def go_http_checks(port, out, err):
    """How the Go wrapper ties lines to calls without a per-call context: by the calls
    running as a line begins."""

    def new_lines(stream, before):
        time.sleep(0.2)
        stream.seek(0)
        return [line for line in stream.read().splitlines() if line][before:]

    def count(stream):
        stream.seek(0)
        return len([line for line in stream.read().splitlines() if line])

    def unended_lines_and_the_log_package():
        seen_out, seen_err = count(out), count(err)
        request(port, "GET", "/print-unended", headers={"X-Request-Id": "call-8"})
        expect(new_lines(out, seen_out) == ["[call-8] unended "], new_lines(out, seen_out))
        # The log package's lines go out at once (log.Fatal exits right after), the
        # others through the tagging pipe: their order may differ.
        errs = sorted(new_lines(err, seen_err), key=lambda line: line.endswith(" from log"))
        expect(len(errs) == 2 and errs[0] == "[call-8] on stderr", errs)
        expect(errs[1].startswith("[call-8] ") and errs[1].endswith(" from log"), errs)

    def lines_of_calls_running_at_once_are_tied_to_none():
        seen = count(out)
        slow = threading.Thread(target=lambda: request(port, "GET", "/sleep"))
        slow.start()
        time.sleep(0.2)
        request(port, "GET", "/print", headers={"X-Request-Id": "call-9"})
        slow.join()
        request(port, "GET", "/print", headers={"X-Request-Id": "call-10"})
        expect(new_lines(out, seen) == ["[-] hello from handler", "[call-10] hello from handler"],
               new_lines(out, seen))

    return [("a call's unended line and log package lines are its own", unended_lines_and_the_log_package),
            ("lines while calls run at once are tied to none", lines_of_calls_running_at_once_are_tied_to_none)]


def python_http_checks(port, proc, out):
    """What the Python wrapper's own HTTP server must get right beyond the shared contract."""

    def bad_requests():
        cases = [
            (b"NONSENSE\r\n\r\n", 400),
            (b"GET /x HTTP/2.0\r\n\r\n", 505),
            (b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n", 400),
            (b"POST /x HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
            (b"POST /x HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n", 400),
            (b"POST /x HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n", 413),
            (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
            (b"GET /x HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),
            (b"GET /x HTTP/1.1\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n", 431),
        ]
        for raw, want in cases:
            got = raw_exchange(port, raw)
            expect(status_of(got) == want, (raw[:40], got[:200]))
            head, _, body = got.partition(b"\r\n\r\n")
            expect(b"Connection: close" in head and json.loads(body)["error"], got[:300])
        resp, _ = request(port, "GET", "/still-serving")
        expect(resp.status == 200, f"status {resp.status}")

    def pipelined():
        got = raw_exchange(port, b"GET /p1 HTTP/1.1\r\nHost: a\r\n\r\n"
                                 b"POST /p2 HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n{\"n\":2}"
                                 b"GET /p3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        paths = [json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0])["_http"]["path"]
                 for part in got.split(b"HTTP/1.1 200")[1:]]
        expect(paths == ["/p1", "/p2", "/p3"], got[:1000])
        expect(b'"n":2' in got, got[:1000])

    def expect_continue():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /c HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 8\r\n\r\n")
            interim = s.recv(1000)
            expect(interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim)
            s.sendall(b'{"c": 1}')
            got = b""
            while b'"c":1' not in got:
                chunk = s.recv(65536)
                expect(chunk, got)
                got += chunk
            expect(status_of(got) == 200, got[:200])

    def header_not_latin1():
        resp, data = request(port, "GET", "/not-latin1")
        expect(resp.status == 500 and "X-Price" in json.loads(data)["error"], (resp.status, data))

    def sigterm_finishes_in_flight():
        # The last check: the server exits.
        results = []
        t = threading.Thread(target=lambda: results.append(request(port, "GET", "/slow")))
        t.start()
        deadline = time.time() + 10
        while time.time() < deadline:
            out.seek(0)
            if "slow call started" in out.read():
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        t.join()
        expect(results and results[0][0].status == 200 and results[0][1] == b'"slow done"', results)
        expect(proc.wait(timeout=15) == 0, f"exit code {proc.returncode}")

    return [("malformed requests get 4xx/5xx and a JSON error", bad_requests),
            ("pipelined requests answered in order", pipelined), ("Expect: 100-continue", expect_continue),
            ("non-Latin-1 response header -> 500", header_not_latin1),
            ("SIGTERM lets the in-flight call finish", sigterm_finishes_in_flight)]


def test_ready_fd(rt):
    """SLESS_READY_FD: one byte once the server listens, then the runtime closes it."""
    port = free_port()
    read_end, write_end = os.pipe()
    with open(os.path.join(rt.tmp, "ready.log"), "w+") as log:
        proc = subprocess.Popen(rt.argv, env=rt.env(PORT=str(port), SLESS_HOST="127.0.0.1",
                                                    SLESS_READY_FD=str(write_end)),
                                pass_fds=(write_end,), stdout=log, stderr=log, cwd=rt.tmp)
        os.close(write_end)
        try:
            def announces():
                first = os.read(read_end, 10)
                expect(first == b"1", first)
                resp, _ = request(port, "GET", "/health")  # at once: no retry
                expect(resp.status == 200, f"status {resp.status}")
                expect(os.read(read_end, 10) == b"", "the runtime keeps the ready descriptor open")
                expect(proc.poll() is None, "the server exited")

            check(rt.name, "ready byte on SLESS_READY_FD once listening, then closed", announces)
        finally:
            os.close(read_end)
            proc.kill()
            proc.wait()

    def bad_ready_fd():
        for value in ("99", "not-a-number"):  # a closed descriptor, garbage: serve anyway
            bad_port = free_port()
            proc, out, err = start_server(rt, bad_port, SLESS_READY_FD=value)
            try:
                resp, _ = request(bad_port, "GET", "/x")
                expect(resp.status == 200, f"{value}: status {resp.status}")
            finally:
                proc.kill()
                proc.wait()
                out.close()
                err.close()

    check(rt.name, "a bad SLESS_READY_FD is ignored", bad_ready_fd)


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket, as sless calls an instance in embedded mode."""

    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def test_listen_fd(rt):
    """SLESS_LISTEN_FD: serves on the inherited listening Unix socket, not on PORT."""
    path = os.path.join(rt.tmp, "instance.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    port = free_port()
    read_end, write_end = os.pipe()
    env = rt.env(PORT=str(port), SLESS_LISTEN_FD=str(listener.fileno()), SLESS_READY_FD=str(write_end))
    with open(os.path.join(rt.tmp, "listen.log"), "w+") as log:
        proc = subprocess.Popen(rt.argv, env=env, pass_fds=(listener.fileno(), write_end),
                                stdout=log, stderr=log, cwd=rt.tmp)
        # The runtime holds the only listener now, as under sless.
        listener.close()
        os.close(write_end)
        try:
            def serves_on_the_socket():
                expect(os.read(read_end, 10) == b"1", "no ready byte")
                conn = UnixHTTPConnection(path)
                try:
                    resp, _ = request(None, "GET", "/health", conn=conn)
                    expect(resp.status == 200, f"health: status {resp.status}")
                    resp, data = request(None, "POST", "/a?x=1", b'{"k": "v"}',
                                         {"Content-Type": "application/json"}, conn=conn)
                    event = json.loads(data)
                    expect(resp.status == 200 and event.get("k") == "v", (resp.status, data[:300]))
                finally:
                    conn.close()

            def not_on_port():
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                except ConnectionRefusedError:
                    return
                raise AssertionError(f"something listens on PORT {port}")

            def sigterm_ends_it():
                proc.send_signal(signal.SIGTERM)
                expect(proc.wait(timeout=15) == 0, f"exit {proc.returncode}")
                try:
                    UnixHTTPConnection(path).connect()
                except ConnectionRefusedError:
                    return
                raise AssertionError("the socket still takes connections after the exit")

            for name, fn in [("serves on the listening socket of SLESS_LISTEN_FD", serves_on_the_socket),
                             ("with SLESS_LISTEN_FD nothing listens on PORT", not_on_port),
                             ("SIGTERM closes the inherited listener", sigterm_ends_it)]:
                check(rt.name, name, fn)
        finally:
            os.close(read_end)
            proc.kill()
            proc.wait()


def test_standby(rt):
    """SLESS_STANDBY=1: loaded and listening first, the function directory and env come
    on stdin as one JSON line."""
    if rt.name not in ("python3.11", "nodejs20"):
        return
    n = rt.name

    def start(line):
        port = free_port()
        read_end, write_end = os.pipe()
        env = rt.env(PORT=str(port), SLESS_HOST="127.0.0.1", SLESS_READY_FD=str(write_end), SLESS_STANDBY="1")
        del env["SLESS_FUNCTION_DIR"]
        proc = subprocess.Popen(rt.argv, env=env, pass_fds=(write_end,), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=rt.tmp)
        os.close(write_end)
        proc.stdin.write(line)
        proc.stdin.close()
        return port, proc, read_end

    def finish(proc):
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
        return out, err

    def bound(fn_dir):
        return json.dumps({"dir": fn_dir, "env": {"SLESS_TEST_BOUND": "yes"}}).encode() + b"\n"

    def serves_the_named_dir():
        port, proc, ready = start(bound(rt.fn_dir))
        try:
            expect(os.read(ready, 1) == b"1", "no ready byte")
            _, value = request_json(port, "GET", "/dep")
            expect(value == "dep-ok", value)
            _, value = request_json(port, "GET", "/bound-env")
            expect(value == "yes", value)
        finally:
            os.close(ready)
            proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def announces_loaded_before_bound():
        port = free_port()
        read_end, write_end = os.pipe()
        env = rt.env(PORT=str(port), SLESS_HOST="127.0.0.1", SLESS_READY_FD=str(write_end), SLESS_STANDBY="1")
        del env["SLESS_FUNCTION_DIR"]
        proc = subprocess.Popen(rt.argv, env=env, pass_fds=(write_end,), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=rt.tmp)
        os.close(write_end)
        try:
            readable, _, _ = select.select([read_end], [], [], 30)
            expect(readable and os.read(read_end, 1) == b"1", "no ready byte while waiting on stdin")
            expect(proc.poll() is None, "exited before it was bound")
            proc.stdin.write(bound(rt.fn_dir))
            proc.stdin.close()
            _, value = request_json(port, "GET", "/dep")
            expect(value == "dep-ok", value)
            expect(os.read(read_end, 1) == b"", "a second ready byte once bound")
        finally:
            os.close(read_end)
            proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def let_go_unused():
        port, proc, ready = start(b"")
        os.close(ready)
        out, err = finish(proc)
        expect(proc.returncode == 0 and out == b"" and err == b"", (proc.returncode, out, err))

    def bad_dir():
        port, proc, ready = start(bound("/nonexistent/dir"))
        os.close(ready)
        out, err = finish(proc)
        expect(proc.returncode == 3 and b"/nonexistent/dir" in err, (proc.returncode, err[-500:]))

    def bad_message():
        port, proc, ready = start(b"/a/plain/path\n")
        os.close(ready)
        out, err = finish(proc)
        expect(proc.returncode == 3 and b"bad standby message" in err, (proc.returncode, err[-500:]))

    for name, fn in [("standby serves the directory named on stdin, with its env", serves_the_named_dir),
                     ("standby writes its ready byte once loaded, before it is bound", announces_loaded_before_bound),
                     ("standby let go unused exits 0", let_go_unused),
                     ("standby given a missing directory exits 3", bad_dir),
                     ("standby given a line that is not its JSON exits 3", bad_message)]:
        check(n, name, fn)


def test_python_async(rt):
    """An async handler runs on the server's one event loop, concurrently."""
    if rt.name != "python3.11":
        return
    port = free_port()
    proc, out, err = start_server(rt, port, SLESS_ENTRYPOINT="handler.aserve")
    n = rt.name
    try:
        def one_loop():
            for _ in range(5):
                resp, value = request_json(port, "POST", "/x", '{"a": 1}')
                expect(resp.status == 200 and value["async"] is True, (resp.status, value))
            expect(value["loops"] == 1, f"{value['loops']} event loops for 5 calls")

        def concurrent():
            results = gather(port)
            expect(results == [(200, b'"met"')] * 64, {r for r in results if r != (200, b'"met"')})
            _, value = request_json(port, "GET", "/x")
            expect(value["loops"] == 1, value)

        def errors():
            resp, data = request(port, "GET", "/boom")
            expect(resp.status == 500 and json.loads(data)["error"] == "ValueError: async boom", (resp.status, data))
            resp, data = request(port, "GET", "/exit")
            expect(resp.status == 500 and json.loads(data)["error"] == "SystemExit: 3", (resp.status, data))
            resp, _ = request(port, "GET", "/after")
            expect(resp.status == 200, f"status {resp.status}")
            err.seek(0)
            expect("ValueError: async boom" in err.read(), "no traceback on stderr")

        for name, fn in [("async handler: one event loop for all calls", one_loop),
                         ("async handler: 64 calls at once on that loop", concurrent),
                         ("async handler: exception and sys.exit -> 500, then 200", errors)]:
            check(n, name, fn)
    finally:
        proc.kill()
        proc.wait()
        out.close()
        err.close()


def last_json_line(stdout):
    lines = stdout.rstrip("\n").split("\n")
    return json.loads(lines[-1]), lines


def test_job(rt):
    n = rt.name

    def success():
        p = rt.job('{"action": "job", "x": 1}')
        expect(p.returncode == 0, f"rc {p.returncode}: {p.stderr}")
        value, lines = last_json_line(p.stdout)
        expect(value == {"x": 1}, value)
        expect(lines[:-1] == ["job output"], lines)

    def default_event():
        p = rt.job(None)
        expect(p.returncode == 0, f"rc {p.returncode}: {p.stderr}")
        value, _ = last_json_line(p.stdout)
        expect(value == {}, value)

    def non_object_event():
        p = rt.job("[1, 2]")
        value, _ = last_json_line(p.stdout)
        expect(p.returncode == 0 and value == {"body": [1, 2]}, (p.returncode, value))

    def failure():
        p = rt.job('{"action": "fail"}')
        expect(p.returncode == 1, f"rc {p.returncode}")
        value, _ = last_json_line(p.stdout)
        expect("boom" in value.get("error", ""), value)
        expect(p.stderr.strip() != "", "no traceback on stderr")

    def invalid_event():
        p = rt.job("{not json")
        expect(p.returncode == 2, f"rc {p.returncode}")
        expect("SLESS_EVENT_JSON" in p.stderr, p.stderr)
        value, _ = last_json_line(p.stdout)
        expect("SLESS_EVENT_JSON" in value.get("error", ""), value)

    checks = [("job success, result is the last line", success), ("job default event {}", default_event),
              ("job non-object event", non_object_event), ("job failure exits 1", failure),
              ("job invalid SLESS_EVENT_JSON exits 2", invalid_event)]

    if n in ("python3.11", "nodejs20"):
        other = "handler.ahandle" if n == "python3.11" else "handler.syncHandle"
        key = "async" if n == "python3.11" else "sync"

        def other_kind():
            p = rt.job('{"y": 2}', SLESS_ENTRYPOINT=other)
            value, _ = last_json_line(p.stdout)
            expect(p.returncode == 0 and value == {key: True, "event": {"y": 2}}, (p.returncode, value, p.stderr))

        def load_failure():
            p = rt.job("{}", SLESS_ENTRYPOINT="handler.missing")
            expect(p.returncode == 3, f"job rc {p.returncode}")
            p = subprocess.run(rt.argv, env=rt.env(SLESS_ENTRYPOINT="nomodule.handle", PORT=str(free_port())),
                               capture_output=True, text=True, timeout=30, cwd=rt.tmp)
            expect(p.returncode == 3, f"http rc {p.returncode}")
            expect("nomodule" in p.stderr and p.stdout == "", (p.stdout, p.stderr[-500:]))

        checks += [(f"job with {key} handler", other_kind), ("handler load failure exits 3", load_failure)]

    if n == "nodejs20":
        def esm_handler():
            esm_dir = os.path.join(rt.tmp, "esm")
            write_files(esm_dir, {"package.json": '{"type": "module"}\n',
                                  "handler.js": "export const handle = async (event) => ({ esm: true, event });\n"})
            p = rt.job('{"z": 3}', SLESS_FUNCTION_DIR=esm_dir)
            value, _ = last_json_line(p.stdout)
            expect(p.returncode == 0 and value == {"esm": True, "event": {"z": 3}}, (p.returncode, value, p.stderr))

        checks.append(("ES module handler (\"type\": \"module\")", esm_handler))

    if n == "go1.23":
        def without_go_mod():
            src = os.path.join(rt.tmp, "nomod")
            write_files(src, {"handler.go": 'package handler\n\nfunc Handle(event map[string]any) (any, error) {\n'
                                            '\treturn map[string]any{"nomod": event["v"]}, nil\n}\n'})
            binary = os.path.join(rt.tmp, "bin", "nomod")
            b = subprocess.run(["sh", os.path.join(HERE, "go1.23", "build.sh"), src, binary],
                               capture_output=True, text=True, timeout=600)
            expect(b.returncode == 0, b.stderr[-2000:])
            expect(not os.path.exists(os.path.join(src, "go.mod")), "build.sh wrote into the function dir")
            p = subprocess.run([binary], env=rt.env(SLESS_MODE="job", SLESS_EVENT_JSON='{"v": "ok"}'),
                               capture_output=True, text=True, timeout=60)
            value, _ = last_json_line(p.stdout)
            expect(p.returncode == 0 and value == {"nomod": "ok"}, (p.returncode, value))

        def bad_signature():
            src = os.path.join(rt.tmp, "badsig")
            write_files(src, {"handler.go": "package handler\n\nfunc Handle(event string) string { return event }\n"})
            b = subprocess.run(["sh", os.path.join(HERE, "go1.23", "build.sh"), src, os.path.join(rt.tmp, "bin", "bad")],
                               capture_output=True, text=True, timeout=600)
            expect(b.returncode != 0 and "Handle" in b.stderr, (b.returncode, b.stderr[-1000:]))

        def package_main():
            src = os.path.join(rt.tmp, "pkgmain")
            write_files(src, {"handler.go": "package main\n\nfunc Handle(event map[string]any) (any, error) { return event, nil }\n"})
            b = subprocess.run(["sh", os.path.join(HERE, "go1.23", "build.sh"), src, os.path.join(rt.tmp, "bin", "pkgmain")],
                               capture_output=True, text=True, timeout=600)
            expect(b.returncode != 0 and "handler.go is 'package main'" in b.stderr and "package handler" in b.stderr,
                   (b.returncode, b.stderr[-1000:]))

        checks += [("build without a go.mod", without_go_mod), ("wrong Handle signature fails the build", bad_signature),
                   ("a handler in package main gets a clear error", package_main)]

    for name, fn in checks:
        check(n, name, fn)


def main():
    wanted = sys.argv[1:] or ["python3.11", "nodejs20", "go1.23"]
    tools = {"python3.11": sys.executable, "nodejs20": shutil.which("node"), "go1.23": shutil.which("go")}
    for name in wanted:
        if not tools.get(name):
            print(f"SKIP {name}: {'go' if name == 'go1.23' else 'node'} is not installed")
            continue
        tmp = tempfile.mkdtemp(prefix=f"sless-test-{name}-")
        try:
            try:
                rt = prepare(name, tmp)
            except Exception as exc:
                report(name, "prepare", False, str(exc))
                continue
            for part in (test_http, test_ready_fd, test_listen_fd, test_standby, test_python_async, test_job):
                try:
                    part(rt)
                except Exception as exc:
                    report(name, part.__name__, False, f"{type(exc).__name__}: {exc}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
