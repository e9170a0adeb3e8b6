"""Take docs/img/playground.png: the playground page of a tiny random-weight server after one request.

    python scripts/playground_screenshot.py [OUT.png]

Needs Playwright (a test dependency) and a Chromium (Debian: apt-get install chromium).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "img" / "playground.png"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "cadence.cli", "serve", "--dummy-weights", "--dummy-preset", "tiny"]
    server = subprocess.Popen([*cmd, "--device", "cpu", "--port", str(port)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        while not _ready(url):
            if server.poll() is not None:
                raise SystemExit("cadence serve exited")
            time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 900, "height": 560})
            page.goto(url + "/")
            page.wait_for_selector("#app:not([hidden])")
            page.locator("#language").select_option("english")
            page.get_by_role("button", name="Speak").click()
            expect(page.locator("#stat-status")).to_have_text("done", timeout=120_000)
            page.screenshot(path=str(out), full_page=True)
            browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    print(f"wrote {out}")
    return 0


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
