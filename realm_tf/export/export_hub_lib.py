"""Exports a fine-tuned QA model as five TF Hub SavedModels, as Model Garden's
`export_tfhub_lib` does; `realm_tf/export_hub.py` is the binary, which loads the model.

`<export_dir>/` holds `preprocessor/`, `query_embedder/`, `doc_embedder/`, `reader/`,
`realm_qa/` (`MODULES`, their signatures in `SIGNATURES`) and `export.json` (model, step,
corpus, sizes, signatures). docs/exports.md lists every signature with its shapes.

`doc_embedder/` is not exported again: it is a copy of the very export that embedded the
model's index, so a user re-embedding blocks gets the index's own embeddings.
"""
import json
import os
from typing import Dict

import tensorflow as tf

from realm_tf.export.preprocessor import export_preprocessor
from realm_tf.export.query_embedder import export_query_embedder
from realm_tf.export.realm_qa import export_realm_qa
from realm_tf.export.reader import export_reader

MODULES = ("preprocessor", "query_embedder", "doc_embedder", "reader", "realm_qa")
SIGNATURES = {
    "preprocessor": ("serving_default",),
    "query_embedder": ("serving_default", "embed_ids", "tokenize"),
    "doc_embedder": ("serving_default", "embed_blocks", "embed_texts"),
    "reader": ("span", "mlm", "read_text", "mlm_text"),
    "realm_qa": ("serving_default", "answer_ids"),
}


def copy_tree(source: str, destination: str) -> None:
  """Copies a directory tree (any `tf.io.gfile` paths), replacing `destination`."""
  if tf.io.gfile.exists(destination):
    tf.io.gfile.rmtree(destination)
  for directory, _, files in tf.io.gfile.walk(source):
    target = os.path.join(destination, os.path.relpath(directory, source))
    tf.io.gfile.makedirs(target)
    for name in files:
      tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, name))


def export_hub(model, export_dir: str, k: int = 5) -> Dict[str, str]:
  """Writes the five SavedModels of `model` under `export_dir`; returns {module: path}.

  Args:
    model: a loaded fine-tuned model (`realm_tf.qa.model.QAModel`, with the corpus to package
      into `realm_qa`; its doc embedder is the export that embedded that corpus).
    export_dir: where the five SavedModels go.
    k: evidence blocks per question in `realm_qa`.
  """
  tf.io.gfile.makedirs(export_dir)
  config, tokenizer = model.config, model.tokenizer
  paths = {name: os.path.join(export_dir, name) for name in MODULES}
  export_query_embedder(model.retriever, tokenizer, paths["query_embedder"],
                        query_length=config.query_length)
  copy_tree(model.doc_embedder.path, paths["doc_embedder"])  # the export that built the index
  export_reader(model.reader, tokenizer, paths["reader"], query_length=config.query_length,
                block_length=config.block_length, reader_length=config.reader_length)
  export_realm_qa(model.system(k=k), model.doc_index.embeddings, paths["realm_qa"])
  export_preprocessor(tokenizer, paths["preprocessor"], seq_length=config.query_length)
  with tf.io.gfile.GFile(os.path.join(export_dir, "export.json"), "w") as f:
    json.dump({"model_dir": model.directory, "step": model.info.step,
               "corpus": model.corpus.source, "corpus_fingerprint": model.corpus.fingerprint,
               "num_blocks": len(model.corpus), "k": k, "model": model.config.to_dict(),
               "signatures": {name: list(SIGNATURES[name]) for name in MODULES}}, f, indent=2)
  return paths

