"""`realm-serve`'s page in a real headless browser: Debian's `chromium` (installed by
`make install` when missing) driven by Playwright types a question, submits it and reads the
answer and the evidence titles; the page's screenshot is kept in tests/artifacts/."""
import os
import shutil

import pytest

import serve_helpers
from realm_tf.serving.server import BackgroundServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(ROOT, "tests", "artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
QUESTION = serve_helpers.QUESTIONS[0]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
  return serve_helpers.shared_service(tmp_path_factory)


@pytest.mark.slow
def test_page_answers_a_typed_question_with_its_evidence(service, tmp_path):
  assert CHROMIUM, "no chromium on PATH: run `make install` (it installs Debian's chromium)"
  from playwright.sync_api import sync_playwright  # pylint: disable=g-import-not-at-top
  expected = service.asker.ask(QUESTION)
  app, _ = serve_helpers.make_app(service)
  with BackgroundServer(app) as server, sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
    try:
      page = browser.new_page(viewport={"width": 900, "height": 820})
      external = []
      page.on("request", lambda request: None if request.url.startswith(server.url)
              else external.append(request.url))
      page.goto(server.url + "/")
      page.fill("#question", QUESTION)
      page.click("#ask")
      page.wait_for_selector("#result:not([hidden])", timeout=600_000)
      answer = page.inner_text("#answer")
      titles = page.locator("#evidence li.block .title").all_inner_texts()
      marked = page.locator("#evidence li.best mark").all_inner_texts()
      latency = float(page.inner_text("#latency"))
      screenshot = str(tmp_path / "serve_page.png")
      page.screenshot(path=screenshot, full_page=True)

      page.fill("#question", "   ")  # a bad question shows the server's error, page lives on
      page.click("#ask")
      page.wait_for_selector("#error:not([hidden])", timeout=600_000)
      error = page.inner_text("#error")
    finally:
      browser.close()
  assert answer == (expected.answer or "(no answer span found)")
  assert titles == [e.title or "(untitled)" for e in expected.evidence]
  # The marked text is the answer up to ORQA's spaces between tokens ("Doha . Ada").
  assert ["".join(m.split()) for m in marked] == (
      ["".join(expected.answer.split())] if expected.answer else [])
  assert latency > 0 and not external
  assert '"question" is empty' in error
  os.makedirs(ARTIFACTS, exist_ok=True)
  shutil.copy(screenshot, os.path.join(ARTIFACTS, "serve_page.png"))
