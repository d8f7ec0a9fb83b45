"""Small bundles in exactly the layouts of Google's released REALM/ORQA assets, for the tests of
the loaders (the real files are gs:// downloads these machines cannot reach).

`enwiki-20181220/`: `blocks.tfr` (record i: block i's raw UTF-8 text, the body only),
`titles.tfr` (record i: its page title) and `examples.tfr` (record i: a `tf.train.Example` of
int64 `title_ids`, `token_ids` and `sentence_starts`), as ORQA's Wikipedia preprocessing
writes them.
"""
import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf


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
