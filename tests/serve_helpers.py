"""Shared by the `realm-serve` tests: the tiny-world QA model directory and its served app."""
from realm_tf import tiny_world
from realm_tf.serving import app as app_lib
from realm_tf.serving.batcher import Batcher
from realm_tf.serving.service import AskService
from realm_tf.serving.validation import Limits

QUESTIONS = [question for question, _ in tiny_world.QUESTIONS[:4]]


def build_model_dir(directory: str) -> str:
  """The (untrained) tiny-world model written as a QA model directory, as in ask_test."""
  world = tiny_world.write_open_qa(directory + "/world")
  return tiny_world.write_untrained_model(world, directory + "/model")


_SHARED = {}


def shared_service(tmp_path_factory) -> AskService:
  """The tiny-world model loaded once per test session: the serve test modules share it and
  its traced functions."""
  if "service" not in _SHARED:
    _SHARED["service"] = AskService.load(build_model_dir(str(tmp_path_factory.mktemp("serve"))))
  return _SHARED["service"]


def make_app(service: AskService, max_batch_size: int = 16, max_wait_ms: float = 20.0,
             **limits):
  """(app, batcher) over `service` with the binary's defaults unless overridden."""
  batcher = Batcher(service.answer_batch, max_batch_size, max_wait_ms)
  limits = Limits(num_blocks=service.num_blocks, default_top_k=service.default_top_k,
                  **limits)
  return app_lib.create_app(service, batcher, limits), batcher
