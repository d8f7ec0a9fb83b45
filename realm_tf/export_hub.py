"""`realm-export-hub`: a fine-tuned QA model as TF Hub SavedModels.

Five modules: text preprocessor, query embedder, doc embedder, reader and the end-to-end
realm_qa, each fine-tunable with `hub.KerasLayer(path, trainable=True)`; see
`export/export_hub_lib.py`.

    python -m realm_tf.export_hub --model_dir=/tmp/qa/model --export_dir=/tmp/qa/hub
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import qa_model

_MODEL_DIR = paths.model_dir("Fine-tuned model directory (its best/ is used when present).",
                             required=True)
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "Output directory.", required=True)
_CORPUS = paths.corpus("Knowledge corpus to package into realm_qa (default: the model's).",
                       default="")
_EMBEDDINGS = paths.embeddings_dir(qa_model.EMBEDDINGS_HELP)
_EMBEDDING_DTYPE = index.embedding_dtype(default="auto")
_K = qa_model.k("Evidence blocks per question in realm_qa.")
for group in (index, paths, qa_model):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.data import shards
  from realm_tf.export import export_hub_lib
  from realm_tf.qa.model import QAModel
  from realm_tf.qa.model import find_model_dir
  shards.check_output_directory(_EXPORT_DIR.value, "--export_dir")
  model = QAModel.load(find_model_dir(_MODEL_DIR.value), corpus=_CORPUS.value,
                       embeddings_dir=_EMBEDDINGS.value, embedding_dtype=_EMBEDDING_DTYPE.value)
  paths = export_hub_lib.export_hub(model, _EXPORT_DIR.value, _K.value)
  for name, path in paths.items():
    print(f"{name}: {path}")


def run():
  cli.run("realm-export-hub", main)


if __name__ == "__main__":
  run()
