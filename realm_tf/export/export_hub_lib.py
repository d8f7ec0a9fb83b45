"""Exports a fine-tuned QA model as five TF Hub SavedModels, as Model Garden's
`export_tfhub_lib` does, and a classification run as three; `realm_tf/export_hub.py` is the
binary, which loads the model.

`<export_dir>/` holds `preprocessor/`, `query_embedder/`, `doc_embedder/`, `reader/`,
`realm_qa/` (`MODULES`, their signatures in `SIGNATURES`), or for a classifier
`preprocessor/`, `query_embedder/`, `realm_classifier/` (`CLASSIFIER_MODULES`), and
`export.json` (model, step, corpus, sizes, signatures). docs/exports.md lists every signature.

`doc_embedder/` is not exported again: it is a copy of the very export that embedded the
model's index, so a user re-embedding blocks gets the index's own embeddings.
"""
import json
import os
from typing import Dict

import tensorflow as tf

from realm_tf.export.preprocessor import export_preprocessor
from realm_tf.export.query_embedder import export_query_embedder
from realm_tf.export.realm_classifier import export_realm_classifier
from realm_tf.export.realm_qa import export_realm_qa
from realm_tf.export.reader import export_reader

MODULES = ("preprocessor", "query_embedder", "doc_embedder", "reader", "realm_qa")
SIGNATURES = {
    "preprocessor": ("serving_default",),
    "query_embedder": ("serving_default", "embed_ids", "tokenize"),
    "doc_embedder": ("serving_default", "embed_blocks", "embed_texts"),
    "reader": ("span", "mlm", "read_text", "mlm_text"),
    "realm_qa": ("serving_default", "answer_ids"),
    "realm_classifier": ("serving_default",),
}
CLASSIFIER_MODULES = ("preprocessor", "query_embedder", "realm_classifier")


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
  write_manifest(model, paths, model.info.step, k, model=model.config.to_dict())
  return paths


def export_classifier_hub(model, export_dir: str, k: int = 0) -> Dict[str, str]:
  """Writes the SavedModels of a classification run under `export_dir` (`CLASSIFIER_MODULES`;
  no query embedder without retrieval); returns {module: path}.

  Args:
    model: a loaded `realm_tf.classification.model.ClassificationModel`.
    export_dir: where the SavedModels go.
    k: blocks read per text in `realm_classifier` (0: the run's `task.reader_top_k`).
  """
  tf.io.gfile.makedirs(export_dir)
  k = k or model.default_k
  names = [n for n in CLASSIFIER_MODULES
           if n != "query_embedder" or model.block_index is not None]
  paths = {name: os.path.join(export_dir, name) for name in names}
  if "query_embedder" in paths:  # a run without retrieval has no query tower to export
    export_query_embedder(model.retriever, model.tokenizer, paths["query_embedder"],
                          query_length=model.config.query_length)
  export_realm_classifier(model, paths["realm_classifier"], k)
  export_preprocessor(model.tokenizer, paths["preprocessor"],
                      seq_length=model.config.query_length)
  write_manifest(model, paths, model.step, k, labels=list(model.labels),
                 retrieval=model.settings.retrieval, model=model.config.to_dict())
  return paths


def write_manifest(loaded, paths: Dict[str, str], step: int, k: int, **fields) -> None:
  """`export.json` beside the modules of `paths`: the `loaded` model's directory, its step and
  corpus, k, `fields` and each module's signatures."""
  corpus = loaded.corpus
  with tf.io.gfile.GFile(os.path.join(os.path.dirname(paths["preprocessor"]), "export.json"),
                         "w") as f:
    json.dump(dict({"model_dir": loaded.directory, "step": step, "corpus": corpus.source,
                    "corpus_fingerprint": corpus.fingerprint, "num_blocks": len(corpus),
                    "k": k}, **fields,
                   signatures={name: list(SIGNATURES[name]) for name in paths}), f, indent=2)

