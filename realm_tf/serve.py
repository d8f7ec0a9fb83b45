"""`realm-serve`: a fine-tuned REALM behind an HTTP API and a web page.

    realm-serve --model_dir=/tmp/qa/model [--corpus=...] [--port=8080] [--host=127.0.0.1]

Loads the model directory once (as `realm-ask` does) and serves `GET /` (a page),
`POST /v1/ask`, `GET /v1/info` and `GET /healthz` on 127.0.0.1 unless `--host` says
otherwise; a classification run's directory (its labels.json) is served at
`POST /v1/classify` instead, without the page. Concurrent requests are answered in batches
(`--max_batch_size`, `--max_wait_ms`, `--max_queue`). See `serving/`.
"""
import os
import sys

from absl import app
from absl import flags

from realm_tf import cli
from realm_tf import errors
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import qa_model
from realm_tf.flag_groups import runtime

_MODEL = qa_model.define_qa_model_flags()
_K = qa_model.k("Evidence blocks read per question when a request has no top_k.")
for group in (cli, index, paths, qa_model, runtime):
  flags.adopt_module_key_flags(group)  # their flags in --help
_MAX_TOP_K = flags.DEFINE_integer("max_top_k", 50, "Largest top_k a request may ask for "
                                  "(the reader reads every block retrieved).", lower_bound=1)
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to bind; the default serves this "
                            "machine only.")
_PORT = flags.DEFINE_integer("port", 8080, "Port to listen on.", lower_bound=1,
                             upper_bound=65535)
_MAX_BATCH = flags.DEFINE_integer("max_batch_size", 16, "Most questions answered in one "
                                  "forward pass.", lower_bound=1)
_MAX_WAIT = flags.DEFINE_float("max_wait_ms", 5.0, "How long a batch waits to fill after its "
                               "first question (ms).", lower_bound=0)
_MAX_QUEUE = flags.DEFINE_integer("max_queue", 256, "Most questions waiting; more get 503.",
                                  lower_bound=1)
_MAX_CHARS = flags.DEFINE_integer("max_question_chars", 1000, "Longest question, or text to "
                                  "classify (characters).", lower_bound=1)
_MAX_BODY = flags.DEFINE_integer("max_body_bytes", 65536, "Largest request body (bytes); "
                                 "larger ones get 413.", lower_bound=1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  # Imported here so that `--help` does not import TensorFlow.
  from realm_tf.classification import model as runs  # pylint: disable=g-import-not-at-top
  from realm_tf.mips.index_builder import ScannSettings  # pylint: disable=g-import-not-at-top
  from realm_tf.mips.index_builder import Sharding  # pylint: disable=g-import-not-at-top
  from realm_tf.qa import ask_lib  # pylint: disable=g-import-not-at-top
  from realm_tf.qa.released_imports import ReleasedSettings  # pylint: disable=g-import-not-at-top
  from realm_tf.serving import server  # pylint: disable=g-import-not-at-top
  from realm_tf.serving import app as app_lib  # pylint: disable=g-import-not-at-top
  from realm_tf.serving.batcher import Batcher  # pylint: disable=g-import-not-at-top
  from realm_tf.serving.service import AskService  # pylint: disable=g-import-not-at-top
  from realm_tf.serving.service import ClassifyService  # pylint: disable=g-import-not-at-top
  from realm_tf.serving.validation import Limits  # pylint: disable=g-import-not-at-top

  model_dir = _MODEL.model_dir.value or os.environ.get(ask_lib.MODEL_ENV, "")
  if not model_dir:
    raise errors.InputError(errors.describe("--model_dir", "no model directory", "Pass "
                            f"--model_dir=<fine-tuned model> or set ${ask_lib.MODEL_ENV}"))
  run_dir = runs.classification_run_dir(model_dir)
  if run_dir:
    service = ClassifyService.load(run_dir, _MODEL.corpus.value, batch_size=_MAX_BATCH.value)
  else:
    service = AskService.load(
        model_dir, _MODEL.corpus.value, _MODEL.embeddings_dir.value, _K.value,
        _MODEL.index_kind.value, batch_size=_MAX_BATCH.value,
        scann=ScannSettings(**_MODEL.index.scann_values()),
        sharding=Sharding(**_MODEL.index.sharding_values()),
        embedding_dtype=_MODEL.embedding_dtype.value,
        released=ReleasedSettings(**_MODEL.released.values()),
        compute_dtype=_MODEL.compute_dtype.value)
  service.answer_batch(["warm up"], service.default_top_k)  # traces the model functions
  limits = Limits(max_body_bytes=_MAX_BODY.value, max_question_chars=_MAX_CHARS.value,
                  num_blocks=service.num_blocks, max_top_k=_MAX_TOP_K.value,
                  default_top_k=service.default_top_k)
  batcher = Batcher(service.answer_batch, _MAX_BATCH.value, _MAX_WAIT.value, _MAX_QUEUE.value)
  print(f"realm-serve: {service.kind} model {service.model.directory} "
        f"({service.num_blocks} blocks) on "
        f"http://{_HOST.value}:{_PORT.value}/", file=sys.stderr, flush=True)
  server.serve(app_lib.create_app(service, batcher, limits), _HOST.value, _PORT.value)


def run():
  cli.run("realm-serve", main)


if __name__ == "__main__":
  run()
