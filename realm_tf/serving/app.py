"""The Starlette application of `realm-serve`.

    GET  /          the question page (`page.PAGE`)
    GET  /healthz   {"status": "ok"}
    GET  /v1/info   the model, corpus and index identity (`AskService.info`)
    POST /v1/ask    {"question", "top_k"?} -> the answer with its evidence (`responses`)

Every error is a JSON object {"error": "<one line>"}: 400/413 for bad requests
(`validation`), 404/405 for unknown routes, 503 when the batch queue is full, 500 when the
model fails on a batch; the server keeps serving.
"""
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
from realm_tf.serving.service import AskService


def error(status: int, message: str, headers=None) -> JSONResponse:
  return JSONResponse({"error": " ".join(message.split())}, status_code=status,
                      headers=headers)


async def read_body(request: Request, limits: validation.Limits) -> bytes:
  """The request body, refusing (413) one over `max_body_bytes` before reading all of it."""
  declared = request.headers.get("content-length", "")
  if declared.isdigit() and int(declared) > limits.max_body_bytes:
    raise validation.body_too_large(int(declared), limits)
  chunks, size = [], 0
  async for chunk in request.stream():
    size += len(chunk)
    if size > limits.max_body_bytes:
      raise validation.body_too_large(size, limits)
    chunks.append(chunk)
  return b"".join(chunks)


def create_app(service: AskService, batcher: Batcher, limits: validation.Limits) -> Starlette:
  """The application; its lifespan starts and stops `batcher`'s worker thread."""
  info = service.info()

  async def page(request: Request) -> HTMLResponse:
    del request
    return HTMLResponse(PAGE)

  async def healthz(request: Request) -> JSONResponse:
    del request
    return JSONResponse({"status": "ok"})

  async def model_info(request: Request) -> JSONResponse:
    del request
    return JSONResponse(info)

  async def ask(request: Request) -> JSONResponse:
    start = time.perf_counter()
    try:
      parsed = validation.parse_ask(await read_body(request, limits), limits)
      answer = await batcher.submit(parsed.question, parsed.top_k)
    except validation.BadRequest as e:
      return error(e.status, str(e))
    except Overloaded as e:
      return error(503, describe(validation.ENDPOINT, f"the server is busy ({e})",
                                 "Retry in a moment"))
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("answering failed")
      return error(500, describe(validation.ENDPOINT, f"answering failed ({one_line(e)})"))
    return JSONResponse(answer_json(answer, parsed.top_k, 1000 * (time.perf_counter() - start)))

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
                           Route("/v1/ask", ask, methods=["POST"])],
                   exception_handlers={HTTPException: http_error}, lifespan=lifespan)
