"""What the Python bench scripts share: the release binary and a running `sless up`
with a namespace to deploy functions into."""

import json
import os
import copy
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sless_binary():
    """$SLESS, else the release build (cargo honours CARGO_TARGET_DIR)."""
    if os.environ.get("SLESS"):
        return os.environ["SLESS"]
    subprocess.run(["cargo", "build", "--release", "--locked", "-q", "-p", "sless"], check=True, cwd=ROOT)
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                                     capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    return os.path.join(meta["target_directory"], "release/sless")


def zip_bytes(files):
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sless-bench-{os.getpid()}.zip")
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    return data


class Platform:
    """A release `sless up` on a free port with a token for one namespace."""

    def __init__(self, work, log, args=(), sub="bench"):
        binary = sless_binary()
        port = free_port()
        data = os.path.join(work, "data")
        self.binary, self.data = binary, data
        self.proc = subprocess.Popen([binary, "up", "--listen", f"127.0.0.1:{port}", "--data-dir", data, *args],
                                     env={**os.environ, "RUST_LOG": "warn"}, stdout=subprocess.DEVNULL,
                                     stderr=log)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{self.base}/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        self.ns, self.token = self._token(sub)

    def _token(self, sub):
        token = subprocess.run([self.binary, "token", "--sub", sub, "--data-dir", self.data],
                               capture_output=True, text=True, check=True)
        return re.search(r"token for namespace ([^,]*),", token.stderr).group(1), token.stdout.strip()

    def tenant(self, sub):
        """The same server seen by another namespace's token."""
        other = copy.copy(self)
        other.ns, other.token = self._token(sub)
        return other

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def call(self, method, path, body=None, content_type="application/json"):
        req = urllib.request.Request(f"{self.base}/v1/namespaces/{self.ns}{path}", data=body, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": content_type})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read() or b"null")

    def json(self, method, path, value):
        return self.call(method, path, json.dumps(value).encode())

    def upload(self, name, archive):
        boundary = "sless-bench"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"code\"; filename=\"fn.zip\"\r\n"
                f"Content-Type: application/zip\r\n\r\n").encode() + archive + f"\r\n--{boundary}--\r\n".encode()
        self.call("POST", f"/functions/{name}/upload", body, f"multipart/form-data; boundary={boundary}")

    def fn_url(self, name):
        return f"{self.base}/fn/{self.ns}/{name}"

    def invoke_until_200(self, name):
        """Calls the function until it answers 200; the time of that answer."""
        while True:
            try:
                req = urllib.request.Request(self.fn_url(name), data=b"{}", method="POST")
                with urllib.request.urlopen(req, timeout=60) as resp:
                    if resp.status == 200:
                        resp.read()
                        return time.monotonic()
            except urllib.error.HTTPError:
                pass
            time.sleep(0.005)
