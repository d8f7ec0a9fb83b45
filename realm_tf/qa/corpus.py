"""The knowledge corpus the QA system reads: block ids, titles and texts in canonical order.

Legend: N blocks.

`load_corpus(path)` reads
* a directory of `blocks-*.tfrecord` shards (the corpus pipeline's output, `BlockStore`);
* a JSONL file, one block a line: `{"title": ..., "text": ..., "id": optional int}`;
* a DPR passages TSV (`psgs_w100.tsv` form): `id<TAB>text<TAB>title`, an optional header
  line `id text title`.
Blocks are ordered by ascending id (ids default to the line order), so row r of a corpus is
row r of every embedding matrix and index built from it. Malformed lines raise
`MalformedRecordError` naming the file and line.

Only the text is kept: the QA system tokenizes titles and texts itself with the model's
vocabulary, so a corpus prepared for another vocabulary still embeds and reads correctly.
"""
import csv
import dataclasses
import functools
import json
import os
from typing import List, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.data.block_store import BlockStore
from realm_tf.qa.datasets import MalformedRecordError
from realm_tf.retrieval.fingerprint import corpus_fingerprint


@dataclasses.dataclass
class Corpus:
  """Blocks in canonical (ascending id) order.

  Attributes:
    block_ids: int64 [N], strictly increasing.
    titles, texts: N strings each.
    source: where the corpus was read from (for messages and provenance).
  """
  block_ids: np.ndarray
  titles: List[str]
  texts: List[str]
  source: str = ""

  def __post_init__(self):
    self.block_ids = np.asarray(self.block_ids, np.int64)
    if not len(self.block_ids) == len(self.titles) == len(self.texts):
      raise ValueError(f"corpus {self.source!r}: {len(self.block_ids)} ids, "
                       f"{len(self.titles)} titles and {len(self.texts)} texts")
    if not len(self.block_ids):
      raise errors.InputError(errors.describe(self.source or "corpus", "the corpus has no blocks",
                                              "Pass a corpus with at least one block"))
    if np.any(np.diff(self.block_ids) <= 0):
      raise ValueError(f"corpus {self.source!r}: block ids must be strictly increasing")

  def __len__(self) -> int:
    return len(self.block_ids)

  @functools.cached_property
  def fingerprint(self) -> str:
    """`retrieval.fingerprint.corpus_fingerprint` of the ids, titles and texts (computed once)."""
    return corpus_fingerprint(self.block_ids, self.titles, self.texts)

  @classmethod
  def from_blocks(cls, block_ids: Sequence[int], titles: Sequence[str], texts: Sequence[str],
                  source: str = "") -> "Corpus":
    """Builds a corpus from unordered blocks; duplicate ids are an error."""
    ids = np.asarray(block_ids, np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if len(ids) > 1 and np.any(np.diff(ids) == 0):
      raise errors.InputError(errors.describe(
          source or "corpus", f"duplicate block ids {ids[1:][np.diff(ids) == 0][:10].tolist()}",
          "Give each block its own id (a JSONL corpus may leave the ids out)"))
    return cls(ids, [titles[i] for i in order], [texts[i] for i in order], source)

  @classmethod
  def from_block_store(cls, store: BlockStore, source: str = "") -> "Corpus":
    return cls(np.array(store.block_ids), list(store.titles), list(store.texts), source)


def _load_jsonl(path: str, lines: Sequence[str]) -> Corpus:
  ids, titles, texts = [], [], []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise MalformedRecordError(path, number, f"not valid JSON ({e.msg})") from e
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
      raise MalformedRecordError(path, number, 'expected an object with a string "text"')
    title = record.get("title", "")
    if not isinstance(title, str):
      raise MalformedRecordError(path, number, f"title must be a string, got {title!r}")
    block_id = record.get("id", len(ids))
    if isinstance(block_id, bool) or not isinstance(block_id, int) or block_id < 0:
      raise MalformedRecordError(path, number, f"id must be an integer >= 0, got {block_id!r}")
    ids.append(block_id)
    titles.append(title)
    texts.append(record["text"])
  return Corpus.from_blocks(ids, titles, texts, path)


def _load_tsv(path: str, lines: Sequence[str]) -> Corpus:
  ids, titles, texts = [], [], []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    fields = next(csv.reader([line.rstrip("\r\n")], delimiter="\t"))
    if number == 1 and [f.strip() for f in fields] == ["id", "text", "title"]:
      continue
    if len(fields) != 3:
      raise MalformedRecordError(path, number,
                                 f"expected id<TAB>text<TAB>title, got {len(fields)} fields")
    try:
      block_id = int(fields[0])
    except ValueError as e:
      raise MalformedRecordError(path, number, f"id {fields[0]!r} is not an integer") from e
    ids.append(block_id)
    texts.append(fields[1])
    titles.append(fields[2])
  return Corpus.from_blocks(ids, titles, texts, path)


def load_corpus(path: str) -> Corpus:
  """Loads a corpus from a `blocks-*.tfrecord` directory, a JSONL or a DPR TSV file.

  Raises:
    FileNotFoundError: nothing at `path`, or a directory without block shards.
    InputError: a missing, damaged or miscounted shard (`realm_tf.data.shards`).
    MalformedRecordError: a malformed line in a JSONL/TSV corpus.
    ValueError: an empty corpus or duplicate ids.
  """
  if tf.io.gfile.isdir(path):
    return Corpus.from_block_store(BlockStore.load(path), path)  # shards verified
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(errors.describe(
        path, "no corpus at this path", "Pass a blocks-*.tfrecord directory (python -m "
        "pipelines.wikipedia_to_blocks), a JSONL file of {id, title, text} or a DPR TSV file"))
  with tf.io.gfile.GFile(path, "r") as f:
    lines = f.read().splitlines()
  if os.path.splitext(path)[1].lower() in (".tsv", ".csv"):
    return _load_tsv(path, lines)
  return _load_jsonl(path, lines)


def write_corpus_jsonl(corpus: Corpus, path: str) -> None:
  """Writes a corpus as JSONL (`{"id", "title", "text"}` a line)."""
  with tf.io.gfile.GFile(path, "w") as f:
    for block_id, title, text in zip(corpus.block_ids, corpus.titles, corpus.texts):
      f.write(json.dumps({"id": int(block_id), "title": title, "text": text},
                         ensure_ascii=False) + "\n")
