"""The Starlette application of `realm-serve`.

    GET  /              the question page (`page.PAGE`; QA models only)
    GET  /healthz       {"status": "ok"}
    GET  /v1/info       the model's kind ("qa" or "classification") and identity (`info()`)
    POST /v1/ask        QA: {"question", "top_k"?} -> the answer with its evidence
    POST /v1/classify   classification: {"text" | "texts", "top_k"?} -> labels and evidence

Every error is a JSON object {"error": "<one line>"}: 400/413 for bad requests
(`validation`), 404 for the other kind's endpoint (naming the model's kind) and unknown
routes, 405, 503 when the batch queue is full, 500 when the model fails on a batch.
"""
import asyncio
import contextlib
import time

from absl import logging
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.responses import JSONResponse
from starlette.routing import Route

from realm_tf.errors import describe
from realm_tf.errors import one_line
from realm_tf.serving import validation
from realm_tf.serving.batcher import Batcher
from realm_tf.serving.batcher import Overloaded
from realm_tf.serving.page import PAGE
from realm_tf.serving.responses import answer_json
from realm_tf.serving.responses import classifications_json
from realm_tf.serving.service import AskService

ENDPOINTS = {"qa": validation.ENDPOINT, "classification": validation.CLASSIFY_ENDPOINT}
_KINDS = {"qa": "a QA", "classification": "a classification"}


def error(status: int, message: str, headers=None) -> JSONResponse:
  return JSONResponse({"error": " ".join(message.split())}, status_code=status,
                      headers=headers)


async def read_body(request: Request, limits: validation.Limits, endpoint: str) -> bytes:
  """The request body, refusing (413) one over `max_body_bytes` before reading all of it."""
  declared = request.headers.get("content-length", "")
  if declared.isdigit() and int(declared) > limits.max_body_bytes:
    raise validation.body_too_large(int(declared), limits, endpoint)
  chunks, size = [], 0
  async for chunk in request.stream():
    size += len(chunk)
    if size > limits.max_body_bytes:
      raise validation.body_too_large(size, limits, endpoint)
    chunks.append(chunk)
  return b"".join(chunks)


def create_app(service: AskService, batcher: Batcher, limits: validation.Limits) -> Starlette:
  """The application over `service` (an `AskService` or a `ClassifyService`, its `kind`
  "qa" or "classification"); its lifespan starts and stops `batcher`'s worker thread."""
  info = service.info()
  served = ENDPOINTS[service.kind]

  def other_kind(endpoint: str) -> JSONResponse:
    return error(404, describe(endpoint, f"this server serves {_KINDS[service.kind]} model, "
                               f"which answers POST {served}", f"Send the request to {served}"))

  async def page(request: Request):
    del request
    return HTMLResponse(PAGE) if service.kind == "qa" else other_kind("/")

  async def healthz(request: Request) -> JSONResponse:
    del request
    return JSONResponse({"status": "ok"})

  async def model_info(request: Request) -> JSONResponse:
    del request
    return JSONResponse(info)

  async def respond(request: Request, endpoint: str, parse, texts_of, reply) -> JSONResponse:
    """Parses the body, submits its texts to the batcher and replies with their results."""
    if endpoint != served:
      return other_kind(endpoint)
    start = time.perf_counter()
    try:
      parsed = parse(await read_body(request, limits, endpoint), limits)
      results = await asyncio.gather(*[batcher.submit(text, parsed.top_k)
                                       for text in texts_of(parsed)])
    except validation.BadRequest as e:
      return error(e.status, str(e))
    except Overloaded as e:
      return error(503, describe(endpoint, f"the server is busy ({e})", "Retry in a moment"))
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("answering failed")
      return error(500, describe(endpoint, f"answering failed ({one_line(e)})"))
    return JSONResponse(reply(parsed, results, 1000 * (time.perf_counter() - start)))

  async def ask(request: Request) -> JSONResponse:
    return await respond(request, validation.ENDPOINT, validation.parse_ask,
                         lambda parsed: [parsed.question],
                         lambda parsed, results, ms: answer_json(results[0], parsed.top_k, ms))

  async def classify(request: Request) -> JSONResponse:
    return await respond(request, validation.CLASSIFY_ENDPOINT, validation.parse_classify,
                         lambda parsed: parsed.texts,
                         lambda parsed, results, ms: classifications_json(results, parsed.top_k,
                                                                          ms))

  async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return error(exc.status_code, describe(request.url.path, exc.detail), exc.headers)

  @contextlib.asynccontextmanager
  async def lifespan(app):
    del app
    batcher.start()
    try:
      yield
    finally:
      batcher.stop()

  return Starlette(routes=[Route("/", page, methods=["GET"]),
                           Route("/healthz", healthz, methods=["GET"]),
                           Route("/v1/info", model_info, methods=["GET"]),
                           Route("/v1/ask", ask, methods=["POST"]),
                           Route("/v1/classify", classify, methods=["POST"])],
                   exception_handlers={HTTPException: http_error}, lifespan=lifespan)
