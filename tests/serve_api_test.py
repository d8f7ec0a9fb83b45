"""`realm-serve`'s API over loopback with a real HTTP client: answers equal `Asker`'s,
concurrent questions are batched, every bad input gets a one-line JSON 4xx and the server
keeps serving, a model directory that does not load stops the binary at start."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

import serve_helpers
from realm_tf.serving.batcher import Batcher
from realm_tf.serving.batcher import Overloaded
from realm_tf.serving.responses import answer_span
from realm_tf.serving.server import BackgroundServer
from realm_tf.serving.validation import BadRequest
from realm_tf.serving.validation import Limits
from realm_tf.serving.validation import parse_ask

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_CHARS, MAX_BODY = 1000, 65536


@pytest.fixture(scope="module")
def service(tmp_path_factory):
  return serve_helpers.shared_service(tmp_path_factory)


@pytest.fixture(scope="module")
def server(service):
  app, _ = serve_helpers.make_app(service, max_question_chars=MAX_CHARS,
                                  max_body_bytes=MAX_BODY)
  with BackgroundServer(app) as running:
    yield running


@pytest.fixture(scope="module")
def client(server):
  with httpx.Client(base_url=server.url, timeout=600) as http:
    yield http


def assert_same_answer(reply, answer, top_k):
  assert reply["question"] == answer.question and reply["answer"] == answer.answer
  assert reply["score"] == pytest.approx(answer.probability, rel=1e-4, abs=1e-6)
  assert reply["answer_block"] == answer.block and reply["top_k"] == top_k
  assert len(reply["evidence"]) == len(answer.evidence) == top_k
  for i, (block, evidence) in enumerate(zip(reply["evidence"], answer.evidence)):
    assert (block["block_id"], block["title"], block["text"]) == (
        evidence.block_id, evidence.title, evidence.text)
    assert block["score"] == pytest.approx(evidence.probability, rel=1e-4, abs=1e-6)
    if i == answer.block:  # the marked text is the answer up to ORQA's spaces between tokens
      marked = block["text"][block["answer_start"]:block["answer_end"]]
      assert "".join(marked.split()) == "".join(answer.answer.split())
    else:
      assert block["answer_start"] is None and block["answer_end"] is None


def test_answers_equal_askers(client, service):
  for question in serve_helpers.QUESTIONS:
    response = client.post("/v1/ask", json={"question": question})
    assert response.status_code == 200, response.text
    assert_same_answer(response.json(), service.asker.ask(question), 5)
  question = serve_helpers.QUESTIONS[0]
  reply = client.post("/v1/ask", json={"question": question, "top_k": 3}).json()
  assert_same_answer(reply, service.model.system(k=3).answer([question])[0], 3)


def test_page_health_and_info(client, service):
  page = client.get("/")
  assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
  assert 'id="question"' in page.text and "http" not in page.text.replace("http-equiv", "")
  assert client.get("/healthz").json() == {"status": "ok"}
  info = client.get("/v1/info").json()
  assert info["corpus"]["fingerprint"] == service.model.corpus.fingerprint
  assert info["corpus"]["num_blocks"] == 16 and info["default_top_k"] == 5
  assert info["index"]["kind"] == "brute_force" and info["index"]["version"]
  assert info["config"] == service.model.config.to_dict()


def test_concurrent_questions_share_one_batch(service):
  """8 questions sent at once, with a batch that waits long enough for all of them, are
  answered in one forward pass, each as `Asker` answers it."""
  # The batch closes on its 8th question; the wait only bounds a hang (no race with the clock).
  app, batcher = serve_helpers.make_app(service, max_batch_size=8, max_wait_ms=600_000)
  questions = (serve_helpers.QUESTIONS * 2)[:8]

  async def ask_all(url):
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
      return await asyncio.gather(*[http.post("/v1/ask", json={"question": q})
                                    for q in questions])

  with BackgroundServer(app) as running:
    replies = asyncio.run(ask_all(running.url))
  assert batcher.batch_sizes == [8]
  for question, reply in zip(questions, replies):
    assert reply.status_code == 200, reply.text
    assert_same_answer(reply.json(), service.asker.ask(question), 5)


def _json(value) -> bytes:
  return json.dumps(value).encode("utf-8")


BAD_REQUESTS = [
    ("empty question", _json({"question": ""}), 400, '"question" is empty'),
    ("whitespace question", _json({"question": " \t\n "}), 400, '"question" is empty'),
    ("50,000 characters", _json({"question": "who " * 12500}), 400, "over the limit of 1000"),
    ("control character", _json({"question": "who wrote\x00 hamlet?"}), 400, "U+0000"),
    ("escape character", _json({"question": "who \x1b[31m wrote"}), 400, "U+001B"),
    ("lone surrogate", b'{"question": "\\ud800 who"}', 400,
     '"question" holds the lone surrogate U+D800 at character 0. Write the character itself'),
    ("non-UTF-8 body", b'{"question": "caf\xe9?"}', 400, "not UTF-8"),
    ("malformed JSON", b'{"question": "who wrote', 400, "not JSON"),
    ("JSON list", _json(["who wrote hamlet?"]), 400, "not an object"),
    ("empty body", b"", 400, "not JSON"),
    ("question not a string", _json({"question": 7}), 400, "must be a string"),
    ("missing question", _json({"top_k": 2}), 400, "must be a string"),
    ("unknown field", _json({"question": "who?", "k": 2}), 400, "unknown field"),
    ("top_k zero", _json({"question": "who?", "top_k": 0}), 400, "outside 1..16"),
    ("top_k negative", _json({"question": "who?", "top_k": -3}), 400, "outside 1..16"),
    ("top_k above the index", _json({"question": "who?", "top_k": 17}), 400, "outside 1..16"),
    ("top_k not an integer", _json({"question": "who?", "top_k": "5"}), 400, "an integer"),
    ("top_k boolean", _json({"question": "who?", "top_k": True}), 400, "an integer"),
    ("top_k float", _json({"question": "who?", "top_k": 2.5}), 400, "an integer"),
    ("deeply nested JSON", b"[" * 30000 + b"]" * 30000, 400, "JSON"),
    ("body over the size limit", _json({"question": "a" * (MAX_BODY + 10)}), 413,
     "over the limit of 65536"),
]


@pytest.mark.parametrize("body,status,message", [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_input_gets_one_line_json_and_the_server_keeps_serving(client, body, status,
                                                                    message):
  response = client.post("/v1/ask", content=body,
                         headers={"content-type": "application/json"})
  assert response.status_code == status, response.text
  reply = response.json()
  assert list(reply) == ["error"] and "\n" not in reply["error"]
  assert reply["error"].startswith("/v1/ask: ") and message in reply["error"]
  assert client.post("/v1/ask", json={"question": serve_helpers.QUESTIONS[0]}).status_code == 200


def test_body_over_the_limit_without_content_length(client):
  def chunks():
    for _ in range(MAX_BODY // 1000 + 2):
      yield b" " * 1000

  response = client.post("/v1/ask", content=chunks())
  assert response.status_code == 413 and "over the limit" in response.json()["error"]


@pytest.mark.parametrize("method,path,status", [("GET", "/nowhere", 404),
                                                ("GET", "/v1/ask", 405),
                                                ("POST", "/healthz", 405)])
def test_unknown_routes_get_json_errors(client, method, path, status):
  response = client.request(method, path)
  assert response.status_code == status
  assert list(response.json()) == ["error"]


def test_batcher_groups_by_top_k_reports_errors_and_refuses_when_full():
  calls = []

  def answer_batch(questions, top_k):
    calls.append((list(questions), top_k))
    if "fail" in questions:
      raise RuntimeError("model failed")
    return [f"{q}@{top_k}" for q in questions]

  async def run():
    batcher = Batcher(answer_batch, max_batch_size=4, max_wait_ms=600_000, max_queue=4)
    results = [batcher.submit(q, k) for q, k in (("a", 1), ("b", 2), ("c", 1), ("d", 2))]
    batcher.start()
    answers = await asyncio.gather(*results)
    with pytest.raises(RuntimeError, match="model failed"):
      await asyncio.gather(batcher.submit("fail", 1), batcher.submit("x", 1),
                           batcher.submit("y", 1), batcher.submit("z", 1))
    batcher.stop()
    return answers, batcher

  answers, batcher = asyncio.run(run())
  assert answers == ["a@1", "b@2", "c@1", "d@2"]
  assert calls[:2] == [(["a", "c"], 1), (["b", "d"], 2)] and batcher.batch_sizes == [4, 4]

  async def overflow():
    full = Batcher(answer_batch, max_queue=1)  # not started: nothing leaves the queue
    waiting = asyncio.ensure_future(full.submit("a", 1))
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
      await full.submit("b", 1)
    waiting.cancel()

  asyncio.run(overflow())


def test_top_k_is_capped_by_max_top_k():
  limits = Limits(num_blocks=24, max_top_k=10, default_top_k=5)
  assert parse_ask(b'{"question": "who?", "top_k": 10}', limits).top_k == 10
  assert parse_ask(b'{"question": "who?"}', limits).top_k == 5
  with pytest.raises(BadRequest, match=r"outside 1..10 \(the server reads at most 10 blocks"):
    parse_ask(b'{"question": "who?", "top_k": 11}', limits)


def test_answer_span():
  assert answer_span("Shakespeare", "Hamlet by William Shakespeare.") == (18, 29)
  assert answer_span("william", "Hamlet by William Shakespeare.") == (10, 17)
  assert answer_span("", "text") is None and answer_span("Dickens", "text") is None
  # ORQA's answers join the text's tokens by spaces.
  assert answer_span("O ' Connor .", "Sinead O'Connor. Born") == (7, 16)
  assert answer_span("doha . ada", "Ada lives in Doha.\nAda works.") == (13, 22)
  assert answer_span("東 京", "東京都") == (0, 2) and answer_span(" ", "ab") is None


def test_help_does_not_import_tensorflow():
  code = "import sys, realm_tf.serve; assert 'tensorflow' not in sys.modules"
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _serve(*flags):
  return subprocess.Popen([sys.executable, "-m", "realm_tf.serve", *flags], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_model_dir_that_does_not_load_stops_the_binary(tmp_path):
  process = _serve(f"--model_dir={tmp_path}", f"--port={_free_port()}")
  _, stderr = process.communicate(timeout=900)
  assert process.returncode == 2
  last = stderr.strip().splitlines()[-1]
  assert last.startswith(f"realm-serve: {tmp_path}: does not load as a QA model (")
  assert "Pass --model_dir=" in last


@pytest.mark.slow
def test_binary_serves_on_loopback(service):
  port = _free_port()
  process = _serve(f"--model_dir={service.model.directory}", f"--port={port}")
  try:
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900  # TensorFlow's import and the model's load, on any host
    while True:
      assert process.poll() is None, process.communicate()[1]
      try:
        if httpx.get(url + "/healthz").status_code == 200:
          break
      except httpx.TransportError:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    question = serve_helpers.QUESTIONS[0]
    reply = httpx.post(url + "/v1/ask", json={"question": question}, timeout=600)
    assert_same_answer(reply.json(), service.asker.ask(question), 5)
  finally:
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=900)
