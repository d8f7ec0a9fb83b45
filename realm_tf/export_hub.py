"""`realm-export-hub`: a fine-tuned QA model as TF Hub SavedModels.

Five modules: text preprocessor, query embedder, doc embedder, reader and the end-to-end
realm_qa, each fine-tunable with `hub.KerasLayer(path, trainable=True)`; see
`export/export_hub_lib.py`.

    python -m realm_tf.export_hub --model_dir=/tmp/qa/model --export_dir=/tmp/qa/hub
"""
from absl import flags

from realm_tf import cli


_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Fine-tuned model directory (its best/ "
                                 "is used when present).", required=True)
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "Output directory.", required=True)
_CORPUS = flags.DEFINE_string("corpus", "", "Knowledge corpus to package into realm_qa "
                              "(default: the model's).")
_EMBEDDINGS = flags.DEFINE_string("embeddings_dir", "", "Precomputed embeddings of --corpus "
                                  "(as realm-ask's --embeddings_dir).")
_EMBEDDING_DTYPE = cli.define_embedding_dtype_flag()
flags.declare_key_flag("embedding_dtype")  # in --help
_K = flags.DEFINE_integer("k", 5, "Evidence blocks per question in realm_qa.", lower_bound=1)


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
