"""The one knowledge corpus: block ids, titles and texts in canonical order, and wordpieces.

Row r of a `Corpus` is row r of every block-embedding matrix and MIPS index built from it;
`fingerprint` (`retrieval.fingerprint.corpus_fingerprint`) identifies those blocks in that
order so an index can be checked against its corpus. Legend: N blocks, T wordpieces.

`Corpus.load(path)` reads
* a directory of `blocks-*.tfrecord` shards (the corpus pipeline's output), verified by
  `realm_tf.data.shards.check_shards`; the blocks keep the pipeline's wordpieces;
* a JSONL file, one block a line: `{"title": ..., "text": ..., "id": optional int}`;
* a DPR passages TSV (`psgs_w100.tsv` form): `id<TAB>text<TAB>title`, an optional header
  line `id text title`.
Blocks are ordered by ascending id (ids default to the line order). Malformed lines raise
`errors.MalformedRecordError` naming the file and line.

Wordpieces: the ids stored in pipeline shards are valid only for the vocabulary the pipeline
tokenized with (`--vocab_file`). Whoever embeds or featurizes blocks asks
`corpus.wordpieces(tokenizer)` with its own tokenizer: the stored wordpieces where the
tokenizer reproduces them (checked on sampled titles), else the titles and texts tokenized by
it, so a JSONL corpus, or shards made for another vocabulary, embed correctly too.
"""
import csv
import dataclasses
import functools
import json
import os
from typing import List, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.retrieval.fingerprint import corpus_fingerprint
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_CHECKED_TITLES = 64  # sampled titles re-tokenized to check stored wordpieces
_TOKENIZE_BATCH = 4096


def _ragged(rows: Sequence[Sequence[int]]) -> tf.RaggedTensor:
  """int64 RaggedTensor [N, (T)] of N id lists."""
  lengths = np.array([len(r) for r in rows], np.int64)
  values = (np.concatenate([np.asarray(r, np.int64) for r in rows]) if lengths.sum()
            else np.zeros([0], np.int64))
  return tf.RaggedTensor.from_row_lengths(values, lengths)


def _tokenize(tokenizer: WordpieceTokenizer, strings: Sequence[str]) -> tf.RaggedTensor:
  """int64 RaggedTensor [N, (T)] of `strings` tokenized in batches."""
  parts = [tf.cast(tokenizer(tf.constant(list(strings[start:start + _TOKENIZE_BATCH]),
                                         tf.string)), tf.int64)
           for start in range(0, len(strings), _TOKENIZE_BATCH)]
  return tf.concat(parts, axis=0) if len(parts) > 1 else parts[0]


@dataclasses.dataclass
class Corpus:
  """Blocks as parallel arrays in ascending `block_ids` order.

  Attributes:
    block_ids: int64 [N], strictly increasing.
    titles, texts: N UTF-8 strings each.
    source: where the corpus was read from (for messages and provenance).
    title_ids, body_ids: int64 RaggedTensors [N, (T)], the corpus pipeline's wordpieces
      without specials (its vocabulary only: use `wordpieces`); None for a corpus read from
      JSONL or TSV.
  """
  block_ids: np.ndarray
  titles: List[str]
  texts: List[str]
  source: str = ""
  title_ids: Optional[tf.RaggedTensor] = None
  body_ids: Optional[tf.RaggedTensor] = None

  def __post_init__(self):
    self.block_ids = np.asarray(self.block_ids, np.int64)
    n = len(self.block_ids)
    if (self.title_ids is None) != (self.body_ids is None):
      raise ValueError(f"corpus {self.source!r}: title_ids and body_ids go together")
    rows = [] if self.title_ids is None else [int(self.title_ids.nrows()),
                                              int(self.body_ids.nrows())]
    if any(count != n for count in [len(self.titles), len(self.texts)] + rows):
      raise ValueError(f"corpus {self.source!r}: {n} ids, {len(self.titles)} titles, "
                       f"{len(self.texts)} texts and {rows or 'no'} wordpiece rows")
    if not n:
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

  def rows(self, block_ids) -> np.ndarray:
    """Rows of `block_ids` (int64 array); raises KeyError naming any unknown id."""
    block_ids = np.asarray(block_ids, np.int64)
    rows = np.minimum(np.searchsorted(self.block_ids, block_ids), len(self.block_ids) - 1)
    unknown = block_ids[self.block_ids[rows] != block_ids]
    if unknown.size:
      raise KeyError(f"block ids not in the corpus: {unknown[:10].tolist()}")
    return rows

  def stored_wordpieces_match(self, tokenizer: WordpieceTokenizer) -> bool:
    """Whether there are stored wordpieces and `tokenizer` reproduces them on (up to 64
    evenly) sampled titles, i.e. they are in its vocabulary."""
    if self.title_ids is None:
      return False
    rows = np.unique(np.linspace(0, len(self) - 1, min(_CHECKED_TITLES, len(self))).astype(int))
    fresh = _tokenize(tokenizer, [self.titles[r] for r in rows]).to_list()
    return fresh == tf.gather(self.title_ids, rows).to_list()

  def wordpieces(self, tokenizer: WordpieceTokenizer) -> Tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """(title_ids, body_ids), int64 RaggedTensors [N, (T)] without specials, in `tokenizer`'s
    vocabulary: the stored ones where `stored_wordpieces_match`, else the titles and texts
    tokenized by `tokenizer` (module docstring)."""
    if self.stored_wordpieces_match(tokenizer):
      return self.title_ids, self.body_ids
    if self.title_ids is not None:
      logging.warning("corpus %s: its stored wordpieces are not the tokenizer's (another "
                      "vocabulary); tokenizing its %d blocks", self.source, len(self))
    return _tokenize(tokenizer, self.titles), _tokenize(tokenizer, self.texts)

  @classmethod
  def from_blocks(cls, block_ids: Sequence[int], titles: Sequence[str], texts: Sequence[str],
                  title_ids: Optional[Sequence[Sequence[int]]] = None,
                  body_ids: Optional[Sequence[Sequence[int]]] = None,
                  source: str = "") -> "Corpus":
    """Builds a corpus from unordered blocks (wordpieces optional); duplicate ids are an
    `InputError`."""
    ids = np.asarray(block_ids, np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if len(ids) > 1 and np.any(np.diff(ids) == 0):
      raise errors.InputError(errors.describe(
          source or "corpus", f"duplicate block ids {ids[1:][np.diff(ids) == 0][:10].tolist()}",
          "Give each block its own id (a JSONL corpus may leave the ids out)"))
    pick = lambda seq: [seq[i] for i in order]
    wordpieces = (None, None) if title_ids is None else (_ragged(pick(list(title_ids))),
                                                         _ragged(pick(list(body_ids))))
    return cls(ids, pick(list(titles)), pick(list(texts)), source, *wordpieces)

  @classmethod
  def load(cls, path: str) -> "Corpus":
    """Loads a corpus from a `blocks-*.tfrecord` directory, a JSONL or a DPR TSV file.

    Raises:
      FileNotFoundError: nothing at `path`, or a directory without block shards.
      InputError: a missing, damaged or miscounted shard (`realm_tf.data.shards`), an empty
        corpus or duplicate ids.
      MalformedRecordError: a malformed line in a JSONL/TSV corpus.
    """
    if tf.io.gfile.isdir(path):
      return _load_shards(path)
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(errors.describe(
          path, "no corpus at this path", "Pass a blocks-*.tfrecord directory (python -m "
          "pipelines.wikipedia_to_blocks), a JSONL file of {id, title, text} or a DPR TSV file"))
    with tf.io.gfile.GFile(path, "r") as f:
      lines = f.read().splitlines()
    if os.path.splitext(path)[1].lower() in (".tsv", ".csv"):
      return _load_tsv(path, lines)
    return _load_jsonl(path, lines)

  def write_jsonl(self, path: str) -> None:
    """Writes the blocks as JSONL (`{"id", "title", "text"}` a line; no wordpieces)."""
    with tf.io.gfile.GFile(path, "w") as f:
      for block_id, title, text in zip(self.block_ids, self.titles, self.texts):
        f.write(json.dumps({"id": int(block_id), "title": title, "text": text},
                           ensure_ascii=False) + "\n")


def _load_shards(corpus_dir: str) -> Corpus:
  """Every `blocks-*.tfrecord` shard of `corpus_dir`, verified by `shards.check_shards`
  (against `blocks.manifest.json` where there is one)."""
  files = shards.check_shards(corpus_dir, "blocks").files
  ids, titles, texts, title_ids, body_ids = [], [], [], [], []
  for record in tf.data.TFRecordDataset(files).map(formats.parse_block):
    ids.append(int(record["block_id"]))
    titles.append(record["title"].numpy().decode("utf-8"))
    texts.append(record["text"].numpy().decode("utf-8"))
    title_ids.append(record["title_ids"].numpy())
    body_ids.append(record["body_ids"].numpy())
  return Corpus.from_blocks(ids, titles, texts, title_ids, body_ids, source=corpus_dir)


def _load_jsonl(path: str, lines: Sequence[str]) -> Corpus:
  ids, titles, texts = [], [], []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise errors.MalformedRecordError(path, number, f"not valid JSON ({e.msg})") from e
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
      raise errors.MalformedRecordError(path, number, 'expected an object with a string "text"')
    title = record.get("title", "")
    if not isinstance(title, str):
      raise errors.MalformedRecordError(path, number, f"title must be a string, got {title!r}")
    block_id = record.get("id", len(ids))
    if isinstance(block_id, bool) or not isinstance(block_id, int) or block_id < 0:
      raise errors.MalformedRecordError(path, number,
                                        f"id must be an integer >= 0, got {block_id!r}")
    ids.append(block_id)
    titles.append(title)
    texts.append(record["text"])
  return Corpus.from_blocks(ids, titles, texts, source=path)


def _load_tsv(path: str, lines: Sequence[str]) -> Corpus:
  ids, titles, texts = [], [], []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    fields = next(csv.reader([line.rstrip("\r\n")], delimiter="\t"))
    if number == 1 and [f.strip() for f in fields] == ["id", "text", "title"]:
      continue
    if len(fields) != 3:
      raise errors.MalformedRecordError(
          path, number, f"expected id<TAB>text<TAB>title, got {len(fields)} fields")
    try:
      block_id = int(fields[0])
    except ValueError as e:
      raise errors.MalformedRecordError(path, number,
                                        f"id {fields[0]!r} is not an integer") from e
    ids.append(block_id)
    texts.append(fields[1])
    titles.append(fields[2])
  return Corpus.from_blocks(ids, titles, texts, source=path)
