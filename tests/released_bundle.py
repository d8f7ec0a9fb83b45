"""Small bundles in exactly the layouts of Google's released REALM/ORQA assets, for the tests of
the loaders (the real files are gs:// downloads these machines cannot reach).

`enwiki-20181220/`: `blocks.tfr` (record i: block i's raw UTF-8 text, the body only),
`titles.tfr` (record i: its page title) and `examples.tfr` (record i: a `tf.train.Example` of
int64 `title_ids`, `token_ids` and `sentence_starts`), as ORQA's Wikipedia preprocessing
writes them.

`cc_news_pretrained/embedder/` (`write_embedder`, `write_block_emb`),
`cc_news_pretrained/bert/` (`write_pretrained_bert`) and
`orqa_{nq,wq}_model_from_realm/` (`write_orqa_model`) hold TF1 checkpoints under the released
variable names (`checkpoints.variable_maps`).
"""
import json
import os
import shutil
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf.checkpoints import variable_maps
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models


def random_models(config: ModelConfig, seed: int):
  """A retriever and a reader of `config` with random weights (sd 0.2, layer-norm gammas near
  1), so that towers of different seeds score differently."""
  retriever, reader = build_models(config)
  rng = np.random.default_rng(seed)
  for v in retriever.weights + reader.weights:
    v.assign(rng.normal(0.0, 0.2, v.shape).astype(np.float32) + (1.0 if "gamma" in v.name
                                                                 else 0.0))
  return retriever, reader


def _int64_feature(values: Sequence[int]) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_block_records(directory: str, titles: Sequence[str], texts: Sequence[str],
                        title_ids: Optional[Sequence[Sequence[int]]] = None,
                        token_ids: Optional[Sequence[Sequence[int]]] = None,
                        with_titles: bool = True) -> str:
  """Writes `blocks.tfr` (+ `titles.tfr`, + `examples.tfr` with ids); returns its path."""
  os.makedirs(directory, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(directory, "blocks.tfr")) as writer:
    for text in texts:
      writer.write(text.encode("utf-8"))
  if with_titles:
    with tf.io.TFRecordWriter(os.path.join(directory, "titles.tfr")) as writer:
      for title in titles:
        writer.write(title.encode("utf-8"))
  if token_ids is not None:
    with tf.io.TFRecordWriter(os.path.join(directory, "examples.tfr")) as writer:
      for title, tokens in zip(title_ids, token_ids):
        example = tf.train.Example(features=tf.train.Features(feature={
            "title_ids": _int64_feature(title), "token_ids": _int64_feature(tokens),
            "sentence_starts": _int64_feature([0])}))
        writer.write(example.SerializeToString())
  return os.path.join(directory, "blocks.tfr")


def write_block_emb(prefix: str, embeddings: np.ndarray) -> str:
  """Writes `block_emb` as ORQA's `write_array_to_checkpoint` does (a TF1 graph holding that
  one variable, saved by `tf.compat.v1.train.Saver`); returns `prefix`."""
  os.makedirs(os.path.dirname(prefix), exist_ok=True)
  with tf.Graph().as_default():
    variable = tf.compat.v1.get_variable(
        "block_emb", shape=embeddings.shape, dtype=tf.float32,
        initializer=tf.compat.v1.constant_initializer(embeddings))
    saver = tf.compat.v1.train.Saver([variable])
    with tf.compat.v1.Session() as session:
      session.run(variable.initializer)
      saver.save(session, prefix, write_meta_graph=False)
  return prefix


def write_embedder(root: str, retriever, vocab: Sequence[str]) -> dict:
  """`cc_news_pretrained/embedder/`: `variables/variables` (the retriever's doc tower under the
  pre-trained embedder's names, with an MLM head's bias as the release has), and
  `assets/vocab.txt`; returns {"vocab", "variables", "encoded"} (the prefix `block_emb` goes
  to, `write_block_emb`)."""
  directory = os.path.join(root, "cc_news_pretrained", "embedder")
  os.makedirs(os.path.join(directory, "assets"), exist_ok=True)
  with open(os.path.join(directory, "assets", "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  arrays = checkpoints.tf1_arrays(variable_maps.realm_embedder_map(retriever,
                                                                   doc_tower_only=True))
  arrays["module/module/module/cls/predictions/output_bias"] = np.zeros(len(vocab), np.float32)
  variables = checkpoints.write_tf1_checkpoint(
      arrays, os.path.join(directory, "variables", "variables"))
  return {"vocab": os.path.join(directory, "assets", "vocab.txt"), "variables": variables,
          "encoded": os.path.join(directory, "encoded", "encoded.ckpt")}


def write_pretrained_bert(root: str, reader) -> str:
  """`cc_news_pretrained/bert/variables/variables`: the reader's BERT and MLM head under the
  released knowledge-augmented encoder's names (`bert/...`, `cls/predictions/...`); returns
  the prefix."""
  arrays = checkpoints.tf1_arrays(variable_maps.realm_encoder_map(reader))
  return checkpoints.write_tf1_checkpoint(
      arrays, os.path.join(root, "cc_news_pretrained", "bert", "variables", "variables"))


def write_orqa_model(root: str, name: str, retriever, reader, step: int) -> str:
  """`<name>/` as ORQA fine-tuning leaves it: `params.json` naming the gs:// inputs, and
  `export/best_default/checkpoint/model.ckpt-<step>` (the query tower and the reader under
  the released names, `global_step` and Adam slots); returns the checkpoint prefix."""
  directory = os.path.join(root, name)
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "params.json"), "w") as f:
    json.dump({"retriever_module_path": "gs://realm-data/cc_news_pretrained/embedder",
               "reader_module_path": "gs://realm-data/cc_news_pretrained/bert",
               "block_records_path": "gs://orqa-data/enwiki-20181220/blocks.tfr",
               "num_block_records": 13353718, "reader_seq_len": 320, "query_seq_len": 64,
               "reader_beam_size": 5, "max_answer_length": 10}, f)
  arrays = checkpoints.tf1_arrays(variable_maps.orqa_map(retriever, reader,
                                                         query_tower_only=True))
  for variable in list(arrays):
    arrays[f"{variable}/adam_m"] = np.zeros_like(arrays[variable])
    arrays[f"{variable}/adam_v"] = np.zeros_like(arrays[variable])
  arrays["global_step"] = np.int64(step)
  return checkpoints.write_tf1_checkpoint(
      arrays, os.path.join(directory, "export", "best_default", "checkpoint",
                           f"model.ckpt-{step}"))


def copy_tree(source: str, target: str) -> None:
  shutil.copytree(source, target)
