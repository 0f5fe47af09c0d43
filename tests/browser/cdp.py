"""Drive Debian's headless Chromium over the DevTools protocol, stdlib only.

A tiny websocket client (RFC 6455: masked client frames, text/continuation,
ping/close) talks to the browser endpoint Chromium prints on stderr; the
browser listens on 127.0.0.1 only and is started with a throwaway profile.
Pages are opened as flat sessions (Target.attachToTarget flatten=True), so
one connection serves every page. Only the process this module started is
ended, by its id (its own process group: the renderers it forked).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from urllib.parse import urlparse

BROWSERS = ("chromium", "chromium-browser")
_ENDPOINT = re.compile(rb"DevTools listening on (ws://\S+)")


def find_browser() -> str | None:
    override = os.environ.get("FORENSICS_CHROMIUM")
    if override:
        return override if shutil.which(override) else None
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class WebSocket:
    def __init__(self, url: str, timeout: float = 30.0):
        parsed = urlparse(url)
        if parsed.hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"refusing a non-local DevTools endpoint: {url}")
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {parsed.path} HTTP/1.1\r\nHost: {parsed.hostname}:{parsed.port}\r\n"
                   f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                   f"Sec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        head, self.buffer = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])
        if len(payload) < 126:
            header.append(0x80 | len(payload))
        elif len(payload) < 1 << 16:
            header.append(0x80 | 126)
            header += struct.pack(">H", len(payload))
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", len(payload))
        mask = os.urandom(4)
        header += mask
        self.sock.sendall(bytes(header) + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                raise ConnectionError("DevTools connection closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._exact(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._exact(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._exact(8))[0]
            if second & 0x80:
                mask = self._exact(4)
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self._exact(length)))
            else:
                payload = self._exact(length)
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the websocket")
            if opcode == 0x9:  # ping: answer, keep reading
                continue
            message += payload
            if first & 0x80 and opcode in (0x0, 0x1, 0x2):
                return message.decode()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Browser:
    """One headless Chromium; `page()` opens a tab with its own event log."""

    def __init__(self, binary: str, timeout: float = 30.0):
        self.profile = tempfile.mkdtemp(prefix="forensics-chromium-")
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.ws = None
        deadline, seen = time.monotonic() + timeout, b""
        try:
            while time.monotonic() < deadline:
                line = self.proc.stderr.readline()
                if not line and self.proc.poll() is not None:
                    break
                seen += line
                found = _ENDPOINT.search(line)
                if found:
                    self.ws = WebSocket(found.group(1).decode(), timeout)
                    break
            if self.ws is None:
                raise RuntimeError(f"chromium gave no DevTools endpoint: {seen[-800:].decode(errors='replace')}")
        except BaseException:
            self.close()
            raise
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float = 30.0) -> dict:
        for index, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(index)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = json.loads(self.ws.recv())
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)
        raise TimeoutError(f"no {method} within {timeout}s")

    def page(self, width: int = 1366, height: int = 900) -> "Page":
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        return Page(self, target, session)

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group this module created
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session
        self.load_seconds = None

    def open(self, url: str, timeout: float = 60.0) -> float:
        """Navigate and wait for the load event; seconds from request to load."""
        start = time.perf_counter()
        self.browser.call("Page.navigate", {"url": url}, self.session)
        self.browser.wait_event("Page.loadEventFired", self.session, timeout)
        self.load_seconds = time.perf_counter() - start
        return self.load_seconds

    def evaluate(self, expression: str):
        result = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def events(self, *methods: str) -> list[dict]:
        self.browser.call("Runtime.evaluate", {"expression": "0"}, self.session)  # flush pending events
        return [e for e in self.browser.events if e.get("sessionId") == self.session and e.get("method") in methods]

    def console_errors(self) -> list[str]:
        out = []
        for event in self.events("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded"):
            params = event["params"]
            if event["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(params["exceptionDetails"])[:500])
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(json.dumps(params.get("args"))[:500])
            elif event["method"] == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(params["entry"].get("text", "")[:500])
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events("Network.requestWillBeSent")]

    def screenshot(self, path: str, full_page: bool = False) -> None:
        params = {"format": "png"}
        if full_page:
            width, height = self.evaluate("[document.documentElement.scrollWidth,"
                                          "document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": width, "height": min(height, 12000), "scale": 1})
        data = self.browser.call("Page.captureScreenshot", params, self.session)["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})
