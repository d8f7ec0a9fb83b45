"""Shared by the `realm-serve` tests: the tiny-world QA model directory and its served app."""
import untrained_model
from realm_tf import tiny_world
from realm_tf.serving import app as app_lib
from realm_tf.serving.batcher import Batcher
from realm_tf.serving.service import AskService
from realm_tf.serving.validation import Limits

QUESTIONS = [question for question, _ in tiny_world.QUESTIONS[:4]]


_SHARED = {}


def shared_service(tmp_path_factory) -> AskService:
  """The tiny-world model loaded once per test session: the serve test modules share it and
  its traced functions."""
  if "service" not in _SHARED:
    _SHARED["service"] = AskService.load(untrained_model.shared(tmp_path_factory)[1])
  return _SHARED["service"]


def make_app(service: AskService, max_batch_size: int = 16, max_wait_ms: float = 20.0,
             **limits):
  """(app, batcher) over `service` with the binary's defaults unless overridden."""
  batcher = Batcher(service.answer_batch, max_batch_size, max_wait_ms)
  limits = Limits(num_blocks=service.num_blocks, default_top_k=service.default_top_k,
                  **limits)
  return app_lib.create_app(service, batcher, limits), batcher
