"""`realm-evaluate`: exact match, retriever recall@k and a predictions file with provenance.

    python -m realm_tf.evaluate --model_dir=/tmp/qa/model --data=pyserini:nq-test \\
        --predictions=/tmp/qa/predictions.jsonl

Prints the metrics as JSON (and writes them to --metrics_output). See `qa/evaluate_lib.py`.
"""
import json

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import data
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import qa_model
from realm_tf.flag_groups import runtime
from realm_tf.flag_groups import trainer

_MODEL_DIR = paths.model_dir("Fine-tuned model directory (its best/ is used when present), or "
                             "a released ORQA model directory.", required=True)
_DATA = flags.DEFINE_string("data", None, "Questions: ORQA JSONL, DPR TSV or pyserini:<name>.",
                            required=True)
_DATASET = data.dataset(default="nq")
_CORPUS = paths.corpus(qa_model.CORPUS_HELP, default="")
_EMBEDDINGS = paths.embeddings_dir(qa_model.EMBEDDINGS_HELP)
_EMBEDDING_DTYPE = index.embedding_dtype(default="auto")
_COMPUTE_DTYPE = runtime.compute_dtype(qa_model.COMPUTE_DTYPE_HELP, default="auto")
_INDEX_KIND = index.index_kind(qa_model.INDEX_KIND_HELP, default="",
                               choices=("",) + cli.INDEX_KINDS)
_INDEX = cli.define_index_flags()
_RELEASED = cli.define_released_flags()
_PREDICTIONS = flags.DEFINE_string("predictions", "", "Predictions JSONL to write.")
_METRICS = flags.DEFINE_string("metrics_output", "", "Metrics JSON to write.")
_K = qa_model.k("Blocks read per question.")
_RECALL_KS = flags.DEFINE_list("recall_ks", ["1", "5", "20", "100"], "recall@k cut-offs.")
flags.register_validator("recall_ks", lambda ks: all(k.isdigit() and int(k) >= 1 for k in ks),
                         "--recall_ks must be positive integers, e.g. 1,5,20,100")
_MAX = flags.DEFINE_integer("max_examples", 0, "Questions evaluated (0: all).", lower_bound=0)
_BATCH = trainer.batch_size("Questions per batch.", default=16)
for group in (cli, data, index, paths, qa_model, runtime, trainer):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  import tensorflow as tf
  from realm_tf.mips.index_builder import ScannSettings
  from realm_tf.mips.index_builder import Sharding
  from realm_tf.qa import datasets
  from realm_tf.qa import evaluate_lib
  from realm_tf.qa.ask_lib import Asker
  from realm_tf.qa.released_imports import ReleasedSettings
  dataset = datasets.dataset_of(_DATA.value, _DATASET.value)
  examples = datasets.load_examples(_DATA.value, dataset)
  asker = Asker(_MODEL_DIR.value, corpus=_CORPUS.value, embeddings_dir=_EMBEDDINGS.value,
                k=_K.value, index_kind=_INDEX_KIND.value,
                scann=ScannSettings(**_INDEX.scann_values()),
                sharding=Sharding(**_INDEX.sharding_values()),
                embedding_dtype=_EMBEDDING_DTYPE.value,
                released=ReleasedSettings(**_RELEASED.values()),
                compute_dtype=_COMPUTE_DTYPE.value)
  result = evaluate_lib.evaluate(
      asker.system, examples,
      evaluate_lib.EvalConfig(recall_ks=[int(k) for k in _RECALL_KS.value],
                              max_examples=_MAX.value, batch_size=_BATCH.value),
      predictions_path=_PREDICTIONS.value)
  text = json.dumps(result.metrics, indent=2, sort_keys=True)
  if _METRICS.value:
    with tf.io.gfile.GFile(_METRICS.value, "w") as f:
      f.write(text + "\n")
  print(text)


def run():
  cli.run("realm-evaluate", main)


if __name__ == "__main__":
  run()
