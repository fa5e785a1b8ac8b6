"""A minimal W3C WebDriver client (plain HTTP to chromedriver) for the browser tests: enough to
open a page, find elements, click, type, read text and take a screenshot. It avoids selenium,
whose async dependencies break the hypothesis pytest plugin installed here."""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from typing import Any

import requests

from tests.conftest import free_port

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C element reference key


class WebDriverError(RuntimeError):
    pass


class Element:
    def __init__(self, browser: "HeadlessChromium", ref: str) -> None:
        self.browser, self.ref = browser, ref

    def attribute(self, name: str) -> str | None:
        return self.browser.call("GET", f"element/{self.ref}/attribute/{name}")

    @property
    def text(self) -> str:
        return self.browser.call("GET", f"element/{self.ref}/text")

    def click(self) -> None:
        self.browser.call("POST", f"element/{self.ref}/click", {})

    def send_keys(self, text: str) -> None:
        self.browser.call("POST", f"element/{self.ref}/value", {"text": text})


class HeadlessChromium:
    """chromedriver on a free local port driving a headless Chromium; use as a context manager."""

    def __init__(self, chromium: str | None = None, chromedriver: str | None = None, width: int = 1200,
                 height: int = 800) -> None:
        self.chromium = chromium or shutil.which("chromium")
        self.chromedriver = chromedriver or shutil.which("chromedriver")
        self.size = (width, height)
        self.process: subprocess.Popen | None = None
        self.session: str | None = None

    def __enter__(self) -> "HeadlessChromium":
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen([self.chromedriver, f"--port={port}"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"{self.base}/status", timeout=1).json()["value"]["ready"]:
                    break
            except (requests.RequestException, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise WebDriverError("chromedriver did not start within 20 s")
            time.sleep(0.1)
        arguments = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={self.size[0]},{self.size[1]}"]
        reply = requests.post(f"{self.base}/session", timeout=60, json={"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": {"binary": self.chromium, "args": arguments}}}}).json()
        if "sessionId" not in reply.get("value", {}):
            self.__exit__(None, None, None)
            raise WebDriverError(f"no browser session: {reply.get('value')}")
        self.session = reply["value"]["sessionId"]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.session:
            requests.delete(f"{self.base}/session/{self.session}", timeout=30)
            self.session = None
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        reply = requests.request(method, f"{self.base}/session/{self.session}/{path}", json=body, timeout=60).json()
        value = reply.get("value")
        if isinstance(value, dict) and "error" in value:
            raise WebDriverError(f"{method} {path}: {value['error']}: {value.get('message', '')[:300]}")
        return value

    def get(self, url: str) -> None:
        self.call("POST", "url", {"url": url})

    def find_all(self, css: str) -> list[Element]:
        return [Element(self, ref[ELEMENT]) for ref in self.call("POST", "elements", {"using": "css selector", "value": css})]

    def find(self, css: str) -> Element:
        return Element(self, self.call("POST", "element", {"using": "css selector", "value": css})[ELEMENT])

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("GET", "screenshot"))
