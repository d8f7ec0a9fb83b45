"""`realm-export-hub`: a fine-tuned QA model, or a classification run, as TF Hub SavedModels.

QA: five modules, text preprocessor, query embedder, doc embedder, reader and the end-to-end
realm_qa; a classification run's directory (its labels.json): the preprocessor, the query
embedder and the end-to-end realm_classifier. Each is fine-tunable with
`hub.KerasLayer(path, trainable=True)`; see `export/export_hub_lib.py`.

    python -m realm_tf.export_hub --model_dir=/tmp/qa/model --export_dir=/tmp/qa/hub
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import qa_model

_MODEL_DIR = paths.model_dir("Fine-tuned model directory, or a classification run's "
                             "(its best/ is used when present).", required=True)
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "Output directory.", required=True)
_CORPUS = paths.corpus("Knowledge corpus to package into realm_qa or realm_classifier "
                       "(default: the model's).", default="")
_EMBEDDINGS = paths.embeddings_dir(qa_model.EMBEDDINGS_HELP)
_EMBEDDING_DTYPE = index.embedding_dtype(default="auto")
_K = qa_model.k("Evidence blocks per question in realm_qa; blocks per text in "
                "realm_classifier (default there: the run's task.reader_top_k).")
for group in (index, paths, qa_model):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf import errors
  from realm_tf.classification.model import ClassificationModel
  from realm_tf.classification.model import classification_run_dir
  from realm_tf.data import shards
  from realm_tf.export import export_hub_lib
  from realm_tf.qa.model import QAModel
  from realm_tf.qa.model import find_model_dir
  shards.check_output_directory(_EXPORT_DIR.value, "--export_dir")
  run_dir = classification_run_dir(_MODEL_DIR.value)
  if run_dir:
    if _EMBEDDINGS.value:
      raise errors.InputError(errors.describe(
          "--embeddings_dir", "applies to QA models, not to a classification run",
          "Drop it: the run's doc tower embeds --corpus"))
    model = ClassificationModel.load(run_dir, corpus=_CORPUS.value)
    k = _K.value if flags.FLAGS["k"].present else 0
    paths = export_hub_lib.export_classifier_hub(model, _EXPORT_DIR.value, k)
  else:
    model = QAModel.load(find_model_dir(_MODEL_DIR.value), corpus=_CORPUS.value,
                         embeddings_dir=_EMBEDDINGS.value,
                         embedding_dtype=_EMBEDDING_DTYPE.value)
    paths = export_hub_lib.export_hub(model, _EXPORT_DIR.value, _K.value)
  for name, path in paths.items():
    print(f"{name}: {path}")


def run():
  cli.run("realm-export-hub", main)


if __name__ == "__main__":
  run()
