"""Reading the block records of a corpus directory (`blocks-*.tfrecord`, see
`realm_tf.data.formats`) in Beam, and the corpus fingerprint without loading the texts.

`corpus_fingerprint(corpus_dir)` equals `BlockStore.load(corpus_dir).fingerprint` (sha256 of
the ascending int64 block ids) but reads only the ids, so it stays cheap for 13M blocks.
"""
import dataclasses
import hashlib
import os
from typing import List

import apache_beam as beam
import numpy as np
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data import shards


@dataclasses.dataclass
class BlockRecord:
  """One parsed block record.

  Attributes:
    block_id: the 63-bit content hash.
    title, text: the article title and the block body.
    title_ids, body_ids: int64 [T] wordpieces without specials.
  """
  block_id: int
  title: str
  text: str
  title_ids: np.ndarray
  body_ids: np.ndarray


def parse_block_record(serialized: bytes) -> BlockRecord:
  """A serialized `formats.block_example` -> `BlockRecord` (protobuf only, no TF ops)."""
  feature = tf.train.Example.FromString(serialized).features.feature
  return BlockRecord(
      block_id=int(feature["block_id"].int64_list.value[0]),
      title=feature["title"].bytes_list.value[0].decode("utf-8"),
      text=feature["text"].bytes_list.value[0].decode("utf-8"),
      title_ids=np.asarray(feature["title_ids"].int64_list.value, np.int64),
      body_ids=np.asarray(feature["body_ids"].int64_list.value, np.int64))


def block_files(corpus_dir: str) -> List[str]:
  """The block shards of `corpus_dir`, sorted, verified by `shards.check_shards` (against
  `blocks.manifest.json` where there is one).

  Raises:
    FileNotFoundError: no such directory, or no shards in it.
    InputError: a missing, damaged or miscounted shard, named.
  """
  return shards.check_shards(corpus_dir, "blocks").files


class ReadBlocks(beam.PTransform):
  """A corpus directory -> `BlockRecord`s (every `blocks-*.tfrecord` shard).

  Args:
    corpus_dir: the directory pipeline 1 wrote.
    verify: check the shards (`block_files`) when the pipeline is built.
  """

  def __init__(self, corpus_dir: str, verify: bool = True):
    super().__init__()
    self.corpus_dir = corpus_dir
    self.verify = verify

  def expand(self, pbegin):
    if self.verify:
      block_files(self.corpus_dir)
    return (pbegin
            | "ReadRecords" >> beam.io.ReadFromTFRecord(
                os.path.join(self.corpus_dir, formats.BLOCKS_PATTERN))
            | "Parse" >> beam.Map(parse_block_record))


def corpus_block_ids(corpus_dir: str, batch_size: int = 4096) -> np.ndarray:
  """The block ids of `corpus_dir` in canonical (ascending) order: int64 [N]."""
  spec = {"block_id": formats.BLOCK_FEATURES["block_id"]}
  dataset = (tf.data.TFRecordDataset(block_files(corpus_dir))
             .batch(batch_size)
             .map(lambda records: tf.io.parse_example(records, spec)["block_id"]))
  chunks = [ids.numpy() for ids in dataset]
  ids = np.concatenate(chunks) if chunks else np.zeros([0], np.int64)
  return np.sort(ids.astype(np.int64), kind="stable")


def fingerprint(block_ids: np.ndarray) -> str:
  """sha256 of the canonical int64 block-id sequence (as `BlockStore.fingerprint`)."""
  return hashlib.sha256(np.ascontiguousarray(block_ids, np.int64).tobytes()).hexdigest()


def corpus_fingerprint(corpus_dir: str) -> str:
  """`BlockStore.load(corpus_dir).fingerprint`, reading only the block ids."""
  return fingerprint(corpus_block_ids(corpus_dir))
