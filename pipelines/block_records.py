"""Reading the block records of a corpus directory in Beam, and the corpus ids and fingerprint
without holding the texts.

A corpus directory is either block shards (`blocks-*.tfrecord`, `realm_tf.data.formats`), read
shard by shard by the workers, or the memory-mapped corpus form (`realm_tf.retrieval.
corpus_files`, with the pipeline's wordpieces), read in row ranges of `_ROWS_PER_READ` by the
workers (which must see the directory: local, or a shared file system).

`corpus_ids_and_fingerprint(corpus_dir)` gives the canonical ids and the fingerprint that
`Corpus.load(corpus_dir).fingerprint` gives (`retrieval.fingerprint`): from the corpus form's
manifest, or streaming the shards' records, holding 40 bytes a block (id and block digest), so
it stays cheap for 13M blocks.
"""
import dataclasses
import os
from typing import List, Tuple

import apache_beam as beam
import numpy as np
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.fingerprint import block_digest
from realm_tf.retrieval.fingerprint import fingerprint_digests
from realm_tf.signatures.doc_embedder import export_tokenizer


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


_ROWS_PER_READ = 65536


def _corpus_form_rows(rows: Tuple[int, int], corpus_dir: str, wordpieces: bool,
                      embedder_dir: str):
  """The `BlockRecord`s of rows [start, stop) of a corpus-form directory (empty wordpieces
  unless `wordpieces`): its stored wordpieces, else those of the tokenizer of the
  doc-embedder export `embedder_dir` (cached in the corpus directory by whoever tokenized it
  first, `Corpus.wordpieces`)."""
  store = Corpus.open(corpus_dir)
  title_ids, body_ids = store.title_ids, store.body_ids
  if wordpieces and title_ids is None:
    tokenizer = export_tokenizer(embedder_dir) if embedder_dir else None
    if tokenizer is None:
      raise ValueError(f"{corpus_dir}: the corpus has no stored wordpieces (it was not made "
                       "by the corpus pipeline) and the doc embedder has no tokenizer; the "
                       "index builder needs one of them")
    title_ids, body_ids = store.wordpieces(tokenizer)
  empty = np.zeros([0], np.int64)
  for r in range(*rows):
    yield BlockRecord(int(store.block_ids[r]), store.titles[r], store.texts[r],
                      np.asarray(title_ids.row(r), np.int64) if wordpieces else empty,
                      np.asarray(body_ids.row(r), np.int64) if wordpieces else empty)


def readable_corpus(path: str) -> Tuple[str, int]:
  """(the directory `ReadBlocks` reads, its number of blocks) of a corpus input: block shards
  (verified) as they are, anything else `Corpus.load` takes (a corpus directory, a released
  `blocks.tfr`, JSONL, DPR TSV) as its corpus form, converted once, where the pipeline is
  launched (workers on a cluster must see that directory).

  Raises:
    FileNotFoundError, InputError: as `shards.check_shards` and `Corpus.load`.
  """
  if tf.io.gfile.isdir(path) and not corpus_files.is_corpus_dir(path):
    return path, shards.check_shards(path, "blocks").num_records
  store = Corpus.load(path)
  return store.directory, len(store)


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
  """A corpus directory -> `BlockRecord`s (every `blocks-*.tfrecord` shard, or every row of the
  corpus form).

  Args:
    corpus_dir: the directory pipeline 1 wrote, or a corpus-form directory.
    verify: check the shards (`block_files`) when the pipeline is built.
    wordpieces: the blocks' wordpieces are needed (a corpus form without stored ones is
      tokenized by `embedder_dir`'s tokenizer, or refused); False: a corpus form's records
      carry none.
    embedder_dir: the doc-embedder export the wordpieces are for ("": stored ones only).
  """

  def __init__(self, corpus_dir: str, verify: bool = True, wordpieces: bool = True,
               embedder_dir: str = ""):
    super().__init__()
    self.corpus_dir = corpus_dir
    self.verify = verify
    self.wordpieces = wordpieces
    self.embedder_dir = embedder_dir

  def expand(self, pbegin):
    if corpus_files.is_corpus_dir(self.corpus_dir):
      num_blocks = len(Corpus.open(self.corpus_dir))
      ranges = [(start, min(start + _ROWS_PER_READ, num_blocks))
                for start in range(0, num_blocks, _ROWS_PER_READ)]
      return (pbegin | "RowRanges" >> beam.Create(ranges) | "Reshuffle" >> beam.Reshuffle()
              | "ReadRows" >> beam.FlatMap(_corpus_form_rows, self.corpus_dir, self.wordpieces,
                                           self.embedder_dir))
    if self.verify:
      block_files(self.corpus_dir)
    return (pbegin
            | "ReadRecords" >> beam.io.ReadFromTFRecord(
                os.path.join(self.corpus_dir, formats.BLOCKS_PATTERN))
            | "Parse" >> beam.Map(parse_block_record))


def corpus_ids_and_fingerprint(corpus_dir: str, batch_size: int = 4096
                               ) -> Tuple[np.ndarray, str]:
  """The block ids of `corpus_dir` in canonical (ascending) order, int64 [N], and the corpus
  fingerprint (= `Corpus.load(corpus_dir).fingerprint`), the texts streamed."""
  if corpus_files.is_corpus_dir(corpus_dir):
    store = Corpus.open(corpus_dir)
    return np.asarray(store.block_ids), store.fingerprint
  spec = {name: formats.BLOCK_FEATURES[name] for name in ("block_id", "title", "text")}
  dataset = (tf.data.TFRecordDataset(block_files(corpus_dir))
             .batch(batch_size)
             .map(lambda records: tf.io.parse_example(records, spec)))
  chunks, digests = [], []
  for batch in dataset:
    chunks.append(batch["block_id"].numpy())
    digests.extend(block_digest(title.decode("utf-8"), text.decode("utf-8"))
                   for title, text in zip(batch["title"].numpy(), batch["text"].numpy()))
  ids = np.concatenate(chunks).astype(np.int64) if chunks else np.zeros([0], np.int64)
  return np.sort(ids, kind="stable"), fingerprint_digests(ids, digests)
