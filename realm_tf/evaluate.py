"""`realm-evaluate`: exact match, retriever recall@k and a predictions file with provenance.

    python -m realm_tf.evaluate --model_dir=/tmp/qa/model --data=pyserini:nq-test \\
        --predictions=/tmp/qa/predictions.jsonl

Prints the metrics as JSON (and writes them to --metrics_output). See `qa/evaluate_lib.py`.
"""
import json

from absl import flags

from realm_tf import cli


_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Fine-tuned model directory (its best/ "
                                 "is used when present), or a released ORQA model directory.",
                                 required=True)
_DATA = flags.DEFINE_string("data", None, "Questions: ORQA JSONL, DPR TSV or pyserini:<name>.",
                            required=True)
_DATASET = flags.DEFINE_enum("dataset", "nq", cli.DATASETS,
                             "Decides string or regex (CuratedTrec) answers.")
_CORPUS = flags.DEFINE_string("corpus", "", "Another knowledge corpus (default: the model's).")
_EMBEDDINGS = flags.DEFINE_string("embeddings_dir", "", "Precomputed embeddings of --corpus "
                                  "(as realm-ask's --embeddings_dir).")
_EMBEDDING_DTYPE = cli.define_embedding_dtype_flag()
flags.declare_key_flag("embedding_dtype")  # in --help
_INDEX_KIND = flags.DEFINE_enum("index_kind", "", ("",) + cli.INDEX_KINDS,
                                "MIPS index for --corpus, or of a released model's import "
                                "(default: the model's; ScaNN for a released model).")
_INDEX = cli.define_index_flags()
_RELEASED = cli.define_released_flags()
flags.adopt_module_key_flags(cli)
_PREDICTIONS = flags.DEFINE_string("predictions", "", "Predictions JSONL to write.")
_METRICS = flags.DEFINE_string("metrics_output", "", "Metrics JSON to write.")
_K = flags.DEFINE_integer("k", 5, "Blocks read per question.", lower_bound=1)
_RECALL_KS = flags.DEFINE_list("recall_ks", ["1", "5", "20", "100"], "recall@k cut-offs.")
flags.register_validator("recall_ks", lambda ks: all(k.isdigit() and int(k) >= 1 for k in ks),
                         "--recall_ks must be positive integers, e.g. 1,5,20,100")
_MAX = flags.DEFINE_integer("max_examples", 0, "Questions evaluated (0: all).", lower_bound=0)
_BATCH = flags.DEFINE_integer("batch_size", 16, "Questions per batch.", lower_bound=1)


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
                released=ReleasedSettings(**_RELEASED.values()))
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
