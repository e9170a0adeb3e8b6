"""The playground page at / in a real headless Chromium (Debian's, driven by Playwright): it asks for
the API key, lists the checkpoint's voices, streams speech while counting bytes and time to first
audio, offers the result as a WAV, shows the server's errors, and on a Base checkpoint saves a voice
from an uploaded recording. Skipped, with the reason, where no Chromium is installed."""

from __future__ import annotations

import shutil

import httpx
import pytest
from clips import encode_file, reference_audio
from playwright.sync_api import expect, sync_playwright  # noqa: E402
from serving import FRAME, Server

KEY = "playground-key"
FRAMES = 8
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
]  # fmt: skip


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium installed (Debian: apt-get install chromium; scripts/test.sh installs it where it can)")


@pytest.fixture(scope="module")
def browser():
    executable = chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-ui"), "--api-key", KEY)
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def test_the_page_is_self_contained_and_locked_down(server):
    with server.client() as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert "http" not in page.text.replace("http-equiv", "")  # no other origin: no CDN
        for name in ("app.js", "style.css"):
            assert c.get(f"/ui/{name}").status_code == 200
        assert c.get("/ui/..%2Fapi.py").status_code == 404 and c.get("/ui/secret.txt").status_code == 404


def test_speak_through_the_page(server, browser):
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        page.locator("#api-key").fill(KEY)  # the server wants a key: the page asks for it
        page.get_by_role("button", name="Connect").click()
        page.wait_for_selector("#app:not([hidden])")
        assert "ryan" in page.locator("#voice").evaluate("s => [...s.options].map(o => o.value)")
        assert "english" in page.locator("#language").evaluate("s => [...s.options].map(o => o.value)")
        page.locator("#language").select_option("english")
        page.locator("#max-new-tokens").fill(str(FRAMES))
        page.get_by_role("button", name="Speak").click()
        expect(page.locator("#stat-status")).to_have_text("done", timeout=120_000)
        assert page.locator("#stat-bytes").inner_text().replace(",", "") == str(2 * FRAMES * FRAME)
        assert page.locator("#stat-ttfa").inner_text().endswith(" ms")
        assert float(page.locator("#stat-rtf").inner_text()) > 0
        link = page.locator("#download")
        assert link.is_visible() and link.get_attribute("href").startswith("blob:")
        with page.expect_download() as download:
            link.click()
        assert download.value.path().stat().st_size == 44 + 2 * FRAMES * FRAME

        page.locator("#text").fill("")  # the server's error, shown as it is
        page.get_by_role("button", name="Speak").click()
        page.wait_for_selector("#error:not([hidden])")
        error = page.locator("#error").inner_text()
        assert "input" in error and "400" in error
    finally:
        page.close()


def test_without_the_key_nothing_is_served(server, browser):
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        page.wait_for_selector("#key-panel:not([hidden])")
        assert page.locator("#app").is_hidden()
    finally:
        page.close()
    with httpx.Client(base_url=server.url, trust_env=False) as c:
        assert c.get("/v1/models").status_code == 401


def test_a_base_checkpoint_saves_a_voice_from_the_page(tiny_base_checkpoint, tmp_path, browser):
    s = Server(tiny_base_checkpoint, tmp_path, "--voices-dir", str(tmp_path / "voices")).wait_ready()
    page = browser.new_page()
    try:
        recording = tmp_path / "me.wav"
        recording.write_bytes(encode_file(reference_audio(2.0)))
        page.goto(s.url + "/")
        page.wait_for_selector("#clone-panel:not([hidden])")
        page.locator("#clone-name").fill("From the page")
        page.locator("#clone-file").set_input_files(str(recording))
        page.locator("#clone-text").fill("Words of the recording.")
        page.get_by_role("button", name="Save voice").click()  # no consent yet: the server says why
        page.wait_for_selector("#error:not([hidden])")
        assert "consent" in page.locator("#error").inner_text()
        page.locator("#clone-consent").check()
        page.get_by_role("button", name="Save voice").click()
        expect(page.locator("#clone-status")).to_contain_text("saved", timeout=120_000)
        expect(page.locator("#voice option:checked")).to_have_text("From the page")
        page.locator("#max-new-tokens").fill(str(FRAMES))
        page.get_by_role("button", name="Speak").click()
        expect(page.locator("#stat-status")).to_have_text("done", timeout=120_000)
        assert page.locator("#stat-bytes").inner_text().replace(",", "") == str(2 * FRAMES * FRAME)
    finally:
        page.close()
        assert s.stop() == 0, s.log()[-3000:]
