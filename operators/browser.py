"""Headless Chromium driven over the DevTools protocol, with no network of its own (decision 3901).

`Browser` starts one Chromium process (Debian's `chromium`) and talks to it over its DevTools
WebSocket with aiohttp. Each `render` opens a fresh browser context (no cookies, storage or cache
shared between pages), turns on request interception for every URL, navigates to the page and:

- answers the page's own document with the response the crawl already fetched (never fetched again);
- judges every other request (`udfs.render_requests`): refused with a reason, or handed to the
  caller's `fetch` coroutine, which goes through the crawler's gate and sub-resource cache and
  returns the response (or None: the gate refused it);
- waits until no request has been pending for `settle_ms`, scrolls to the end `scroll_steps` times
  (content loaded on scroll), then reads the DOM.

Chromium also gets a proxy that does not exist, so a request that escaped interception would fail
rather than reach the network. A render ends at `page_timeout_s` with what it has.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from udfs.render_policy import DEFAULT_RENDER_POLICY, RenderPolicy
from udfs.render_requests import FETCH, request_verdict

CHROMIUM_BINARIES = ("chromium", "chromium-browser", "google-chrome")
_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")
# Response headers the browser must not see from us: the body it gets is decoded and whole.
_DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})
_VIEWPORT = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}


# Becomes Chromium (exec keeps the request) after asking Linux to SIGKILL it when the thread that started
# it ends (prctl PR_SET_PDEATHSIG); exits at once if its parent is already gone. Elsewhere it only execs.
_LAUNCHER = """import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


class BrowserUnavailable(RuntimeError):
    """No Chromium binary, or it did not start; the message says which."""


@dataclasses.dataclass(frozen=True)
class Fetched:
    """An HTTP response as the renderer hands it to the browser: status, headers, decoded body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclasses.dataclass(frozen=True)
class Subrequest:
    """One request the browser made and what became of it: `fetched`, `gate_refused`, a refusal reason
    of udfs.render_requests, or `failed` (the fetch raised)."""

    url: str
    resource_type: str
    outcome: str
    status: int | None = None
    response: Fetched | None = None


@dataclasses.dataclass(frozen=True)
class RenderResult:
    url: str
    dom: str                        # the rendered document's HTML ("" when none could be read)
    subrequests: tuple[Subrequest, ...]
    timed_out: bool
    seconds: float

    def outcomes(self) -> Counter[str]:
        return Counter(s.outcome for s in self.subrequests)


FetchSubresource = Callable[[str, str], Awaitable[Fetched | None]]


def find_chromium() -> str | None:
    """The path of a Chromium binary on PATH, or None."""
    return next((path for name in CHROMIUM_BINARIES if (path := shutil.which(name))), None)


class Browser:
    """One Chromium process and its DevTools connection; `async with Browser() as b: await b.render(...)`."""

    def __init__(self, policy: RenderPolicy = DEFAULT_RENDER_POLICY, binary: str | None = None,
                 memory_mb: int = 512) -> None:
        self.policy = policy
        self.binary = binary or find_chromium()
        self.memory_mb = memory_mb
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._listeners: dict[str, Callable[[str, dict[str, Any]], None]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Browser:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, timeout_s: float = 30.0) -> None:
        if self.binary is None:
            raise BrowserUnavailable(f"no Chromium on PATH (looked for {', '.join(CHROMIUM_BINARIES)}); "
                                     f"install Debian's chromium")
        # Chromium's helper processes may still write to the profile as it goes: its removal never fails a render.
        self._profile = tempfile.TemporaryDirectory(prefix="crawler-chromium-", ignore_cleanup_errors=True)
        args = [self.binary, "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self._profile.name}", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
                "--no-sandbox", "--mute-audio", "--blink-settings=imagesEnabled=false",
                # Each browser context is a window, and each window loads the omnibox's two WebUI popups in
                # renderers of their own: most of a render's CPU while it waits for its paced requests.
                "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup",
                # A proxy that does not exist: a request that escaped interception fails here.
                "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                f"--js-flags=--max-old-space-size={self.memory_mb}", "about:blank"]
        # A session of its own, so closing ends the browser's helper processes (zygote, renderers) with it;
        # started through a launcher that asks the kernel to kill it when this process ends without
        # closing it (a worker killed, a TaskManager gone), so no browser outlives its crawler.
        self._proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(os.getpid()), *args],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      start_new_session=True)
        url = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, self._devtools_url),
                                     timeout_s)
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(url, max_msg_size=64 * 1024 * 1024,
                                               timeout=aiohttp.ClientWSTimeout(ws_close=timeout_s))
        self._reader = asyncio.create_task(self._read())

    def _devtools_url(self) -> str:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            found = _LISTENING.search(line)
            if found:
                # Chromium goes on logging: read it away so a full pipe never stops the browser.
                threading.Thread(target=_discard, args=(self._proc.stderr,), daemon=True).start()
                return found.group(1).decode()
        raise BrowserUnavailable(f"{self.binary} exited with {self._proc.wait()} before its DevTools endpoint was up")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        if self._proc is not None:
            _signal_group(self._proc, signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(self._proc, signal.SIGKILL)
                self._proc.wait()
        if self._profile is not None:
            self._profile.cleanup()

    async def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one DevTools command and wait for its result; RuntimeError carries a protocol error."""
        assert self._ws is not None, "start() first"
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[ident] = future
        await self._ws.send_json(message)
        answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error'].get('message', answer['error'])}")
        return answer.get("result", {})

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = message.json()
            if "id" in data:
                future = self._calls.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif (listener := self._listeners.get(data.get("sessionId", ""))) is not None:
                listener(data.get("method", ""), data.get("params", {}))
        for future in self._calls.values():
            if not future.done():
                future.set_exception(BrowserUnavailable("the browser closed its DevTools connection"))

    async def render(self, url: str, document: Fetched, fetch: FetchSubresource) -> RenderResult:
        """Render the page at `url` whose response is `document`, every other request through `fetch`."""
        started = time.monotonic()
        context = (await self.call("Target.createBrowserContext", {"disposeOnDetach": True}))["browserContextId"]
        try:
            target = (await self.call("Target.createTarget", {"url": "about:blank", "browserContextId": context}))["targetId"]
            session = (await self.call("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
            page = _PageRender(self, session, url, document, fetch)
            self._listeners[session] = page.on_event
            try:
                timed_out = not await page.run()
                dom = await page.read_dom()
            finally:
                self._listeners.pop(session, None)
                await page.drain()
        finally:
            with contextlib.suppress(RuntimeError, BrowserUnavailable):
                await self.call("Target.disposeBrowserContext", {"browserContextId": context})
        return RenderResult(url, dom, tuple(page.subrequests), timed_out, time.monotonic() - started)


class _PageRender:
    """One page's render: its interception handlers, its pending requests and its steps."""

    def __init__(self, browser: Browser, session: str, url: str, document: Fetched, fetch: FetchSubresource) -> None:
        self.browser, self.session, self.url, self.document, self.fetch = browser, session, url, document, fetch
        self.policy = browser.policy
        self.subrequests: list[Subrequest] = []
        self.fetched = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.loaded = asyncio.Event()
        self.last_activity = time.monotonic()
        self.document_served = False

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Fetch.requestPaused":
            task = asyncio.create_task(self.answer(params))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            self.last_activity = time.monotonic()
        elif method == "Page.loadEventFired":
            self.loaded.set()

    async def run(self) -> bool:
        """Navigate, settle, scroll; False when the page timeout cut it short."""
        call = self.browser.call
        try:
            async with asyncio.timeout(self.policy.page_timeout_s):
                await call("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}, self.session)
                await call("Page.enable", {}, self.session)
                await call("Emulation.setDeviceMetricsOverride", _VIEWPORT, self.session)
                await call("Page.navigate", {"url": self.url}, self.session)
                await self.loaded.wait()
                await self.settle()
                for _ in range(self.policy.scroll_steps):
                    await call("Runtime.evaluate", {"expression": "window.scrollTo(0, document.documentElement.scrollHeight)"},
                               self.session)
                    self.last_activity = time.monotonic()
                    await self.settle()
            return True
        except TimeoutError:
            return False

    async def settle(self) -> None:
        """Wait until no request has been pending or arrived for `settle_ms`."""
        quiet = self.policy.settle_ms / 1000
        while True:
            if self.tasks:
                await asyncio.wait(set(self.tasks))
                continue
            idle = time.monotonic() - self.last_activity
            if idle >= quiet:
                return
            await asyncio.sleep(quiet - idle)

    async def read_dom(self) -> str:
        try:
            answer = await asyncio.wait_for(self.browser.call(
                "Runtime.evaluate", {"expression": "document.documentElement.outerHTML", "returnByValue": True},
                self.session), 5.0)
        except (TimeoutError, RuntimeError):
            return ""
        dom = str(answer.get("result", {}).get("value") or "")
        return dom.encode("utf-8")[:self.policy.max_dom_bytes].decode("utf-8", "ignore")

    async def drain(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def answer(self, paused: dict[str, Any]) -> None:
        request, kind = paused.get("request", {}), paused.get("resourceType", "Other")
        target = request.get("url", "")
        if kind == "Document" and not self.document_served and _same_document(target, self.url):
            self.document_served = True
            await self.fulfill(paused["requestId"], self.document)
            return
        verdict = request_verdict(target, request.get("method", "GET"), kind, self.url, self.fetched, self.policy)
        if verdict != FETCH:
            self.subrequests.append(Subrequest(target, kind, verdict))
            await self.fail(paused["requestId"])
            return
        self.fetched += 1
        try:
            response = await self.fetch(target, kind)
        except Exception:   # the gate's own errors end this request, never the render
            self.subrequests.append(Subrequest(target, kind, "failed"))
            await self.fail(paused["requestId"])
            return
        if response is None or len(response.body) > self.policy.max_subresource_bytes:
            self.subrequests.append(Subrequest(target, kind, "gate_refused" if response is None else "too_large"))
            await self.fail(paused["requestId"])
            return
        self.subrequests.append(Subrequest(target, kind, "fetched", response.status, response))
        await self.fulfill(paused["requestId"], response)
        self.last_activity = time.monotonic()

    async def fulfill(self, request_id: str, response: Fetched) -> None:
        headers = [{"name": k, "value": v} for k, v in response.headers if k.lower() not in _DROPPED_HEADERS]
        with contextlib.suppress(RuntimeError):
            await self.browser.call("Fetch.fulfillRequest", {
                "requestId": request_id, "responseCode": response.status, "responseHeaders": headers,
                "body": base64.b64encode(response.body).decode("ascii")}, self.session)

    async def fail(self, request_id: str) -> None:
        with contextlib.suppress(RuntimeError):
            await self.browser.call("Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"},
                                    self.session)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Send `signum` to the browser's whole process group (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _discard(stream: Any) -> None:
    for _ in stream:
        pass


def _same_document(requested: str, page: str) -> bool:
    return requested.split("#", 1)[0] == page.split("#", 1)[0]
