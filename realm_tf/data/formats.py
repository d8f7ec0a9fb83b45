"""The record formats every stage agrees on: `tf.train.Example`s in TFRecord shards.

`BLOCK_FEATURES` (`blocks-SSSSS-of-NNNNN.tfrecord`, the corpus pipeline): `block_id` int64 (a
63-bit content hash of title and text, >= 0), `title`, `text` (UTF-8), `title_ids`, `body_ids`
(wordpieces without special tokens; `[CLS] title [SEP] body [SEP]` is <= 288 wordpieces).
`EXAMPLE_FEATURES` (`examples-*.tfrecord`, the salient-span pipeline): `query_ids` (one
sentence, no special tokens), `span_start`, `span_end` (inclusive, 0-based in `query_ids`),
`block_id` (the sentence's block, excluded from retrieval), `span_text`, `span_label`.
`EMBEDDING_FEATURES` (`embeddings-*.tfrecord`, the index builder): `block_id`, `embedding`
float[D].

Row r of every embedding matrix and index is the block of the r-th smallest `block_id`.
"""
import re
from typing import Callable, Dict, Sequence

import tensorflow as tf

from realm_tf import errors

BLOCK_FEATURES = {
    "block_id": tf.io.FixedLenFeature([], tf.int64),
    "title": tf.io.FixedLenFeature([], tf.string),
    "text": tf.io.FixedLenFeature([], tf.string),
    "title_ids": tf.io.RaggedFeature(tf.int64),
    "body_ids": tf.io.RaggedFeature(tf.int64),
}

EXAMPLE_FEATURES = {
    "query_ids": tf.io.RaggedFeature(tf.int64),
    "span_start": tf.io.FixedLenFeature([], tf.int64),
    "span_end": tf.io.FixedLenFeature([], tf.int64),
    "block_id": tf.io.FixedLenFeature([], tf.int64),
    "span_text": tf.io.FixedLenFeature([], tf.string, default_value=b""),
    "span_label": tf.io.FixedLenFeature([], tf.string, default_value=b""),
}

EMBEDDING_FEATURES = {
    "block_id": tf.io.FixedLenFeature([], tf.int64),
    "embedding": tf.io.RaggedFeature(tf.float32),
}

BLOCKS_PATTERN = "blocks-*.tfrecord"
EXAMPLES_PATTERN = "examples-*.tfrecord"
EMBEDDINGS_PATTERN = "embeddings-*.tfrecord"


def _int64s(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _bytes(value) -> tf.train.Feature:
  if isinstance(value, str):
    value = value.encode("utf-8")
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def block_example(block_id: int, title: str, text: str, title_ids, body_ids) -> bytes:
  """A serialized block record."""
  return tf.train.Example(features=tf.train.Features(feature={
      "block_id": _int64s([block_id]), "title": _bytes(title), "text": _bytes(text),
      "title_ids": _int64s(title_ids), "body_ids": _int64s(body_ids)})).SerializeToString()


def pretraining_example(query_ids, span_start: int, span_end: int, block_id: int,
                        span_text: str = "", span_label: str = "") -> bytes:
  """A serialized pre-training example."""
  return tf.train.Example(features=tf.train.Features(feature={
      "query_ids": _int64s(query_ids), "span_start": _int64s([span_start]),
      "span_end": _int64s([span_end]), "block_id": _int64s([block_id]),
      "span_text": _bytes(span_text), "span_label": _bytes(span_label)})).SerializeToString()


def embedding_example(block_id: int, embedding) -> bytes:
  """A serialized block embedding."""
  return tf.train.Example(features=tf.train.Features(feature={
      "block_id": _int64s([block_id]),
      "embedding": tf.train.Feature(float_list=tf.train.FloatList(value=list(embedding)))
  })).SerializeToString()


def parse_pretraining_example(serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
  return tf.io.parse_single_example(serialized, EXAMPLE_FEATURES)


def parse_embedding(serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
  return tf.io.parse_single_example(serialized, EMBEDDING_FEATURES)


def check_schema(files: Sequence[str], parse: Callable[[tf.Tensor], Dict[str, tf.Tensor]],
                 what: str) -> None:
  """Parses the first record of each shard with `parse`, eagerly: a shard of another schema
  is named before a training loop meets it inside a `tf.data` pipeline.

  Raises:
    errors.InputError: naming the shard and the parser's complaint.
  """
  for path in files:
    for record in tf.data.TFRecordDataset(path).take(1):
      try:
        parse(record)
      except tf.errors.InvalidArgumentError as e:
        reason = re.sub(r"\{\{[^}]*\}\}\s*", "", errors.one_line(e))  # the op's name
        raise errors.InputError(errors.describe(
            path, f"not a shard of {what} (record 0: {reason[:200]})",
            "Pass the directory the pipeline that writes them wrote")) from e
