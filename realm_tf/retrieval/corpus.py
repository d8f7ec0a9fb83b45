"""The one knowledge corpus: block ids, titles and texts in canonical order, and wordpieces.

Row r of a `Corpus` (N blocks, ascending id) is row r of every block-embedding matrix and MIPS
index built from it; `fingerprint` identifies those blocks in that order, so that an index can
be checked against its corpus. A corpus lives on disk in the memory-mapped form of
`retrieval.corpus_files`, so opening one costs O(1) whatever N. `Corpus.load(path)` opens such
a directory, and converts any other input (`retrieval.corpus_sources`) into one once,
streaming: beside it (`<file>.corpus/`, `<shard dir>/corpus/`) or under `cache_dir` where that
is not writable, and again when the input changes (size, mtime or shard listing).

Stored wordpieces are valid only for the vocabulary the pipeline used, so whoever embeds or
featurizes asks `corpus.wordpieces(tokenizer)`: the stored ones where the tokenizer reproduces
them (checked on sampled titles), else the blocks tokenized by it once and cached in the
corpus directory, so that a JSONL corpus, or shards of another vocabulary, embed correctly.
"""
import functools
import hashlib
import json
import os
import shutil
import uuid
from typing import Optional, Sequence, Tuple, Union

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval import corpus_sources
from realm_tf.retrieval.columns import RaggedColumn
from realm_tf.retrieval.columns import StringColumn
from realm_tf.retrieval.fingerprint import corpus_fingerprint
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_CHECKED_TITLES = 64  # sampled titles re-tokenized to check stored wordpieces
_TOKENIZE_BATCH = 4096
Wordpieces = Tuple[RaggedColumn, RaggedColumn]


def _tokenized_batches(tokenizer: WordpieceTokenizer, titles: Sequence[str],
                       texts: Sequence[str]):
  """(title_ids, body_ids) RaggedTensors of `_TOKENIZE_BATCH` rows at a time."""
  for start in range(0, len(titles), _TOKENIZE_BATCH):
    stop = min(start + _TOKENIZE_BATCH, len(titles))
    yield tuple(tokenizer(tf.constant(column[start:stop], tf.string))
                for column in (titles, texts))


def _vocab_digest(tokenizer: WordpieceTokenizer) -> str:
  digest = hashlib.sha256(json.dumps([tokenizer.vocabulary, tokenizer.lower_case]).encode())
  return digest.hexdigest()[:16]


class Corpus:
  """Blocks as parallel columns in ascending `block_ids` order.

  Attributes:
    block_ids: int64 [N], strictly increasing (a memmap for an on-disk corpus).
    titles, texts: `StringColumn`s of N UTF-8 strings (lists are converted).
    source: where the corpus was read from (for messages and provenance).
    title_ids, body_ids: `RaggedColumn`s [N, (T)], the wordpieces without specials stored by
      the corpus pipeline or the release's `examples.tfr` (their vocabulary only: use
      `wordpieces`); None for a corpus read from JSONL/TSV.
    directory: the on-disk corpus directory, None for a corpus in memory.
  """

  def __init__(self, block_ids, titles: Union[Sequence[str], StringColumn],
               texts: Union[Sequence[str], StringColumn], source: str = "",
               title_ids=None, body_ids=None, directory: Optional[str] = None,
               fingerprint: Optional[str] = None):
    as_column = lambda c: c if isinstance(c, StringColumn) else StringColumn.from_strings(c)
    as_ragged = lambda c: None if c is None else RaggedColumn.from_ragged(c)
    self.block_ids, self.titles, self.texts = block_ids, as_column(titles), as_column(texts)
    self.source, self.directory = source, directory
    self.title_ids, self.body_ids = as_ragged(title_ids), as_ragged(body_ids)
    if fingerprint is not None:
      self.__dict__["fingerprint"] = fingerprint
    if directory is None:
      self._check()

  def _check(self) -> None:
    self.block_ids = np.asarray(self.block_ids, np.int64)
    n = len(self.block_ids)
    if (self.title_ids is None) != (self.body_ids is None):
      raise ValueError(f"corpus {self.source!r}: title_ids and body_ids go together")
    rows = [] if self.title_ids is None else [len(self.title_ids), len(self.body_ids)]
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
    """`retrieval.fingerprint.corpus_fingerprint` of the ids, titles and texts (computed once;
    stored in the manifest of an on-disk corpus)."""
    return corpus_fingerprint(self.block_ids, self.titles, self.texts)

  def rows(self, block_ids) -> np.ndarray:
    """Rows of `block_ids` (int64 array); raises KeyError naming any unknown id."""
    block_ids = np.asarray(block_ids, np.int64)
    rows = np.minimum(np.searchsorted(self.block_ids, block_ids), len(self.block_ids) - 1)
    unknown = block_ids[np.asarray(self.block_ids[rows]) != block_ids]
    if unknown.size:
      raise KeyError(f"block ids not in the corpus: {unknown[:10].tolist()}")
    return rows

  def sampled_rows(self, count: int = _CHECKED_TITLES) -> np.ndarray:
    """Up to `count` rows spread evenly over the corpus, first and last included: the blocks
    every check against a tokenizer or a doc tower looks at."""
    return np.unique(np.linspace(0, len(self) - 1, min(count, len(self))).astype(int))

  def stored_wordpieces_match(self, tokenizer: WordpieceTokenizer) -> bool:
    """Whether there are stored wordpieces and `tokenizer` reproduces them on (up to 64
    evenly) sampled titles, i.e. they are in its vocabulary."""
    if self.title_ids is None:
      return False
    rows = self.sampled_rows()
    fresh = tokenizer(tf.constant([self.titles[r] for r in rows], tf.string)).to_list()
    return fresh == self.title_ids.gather(rows).to_list()

  def wordpieces(self, tokenizer: WordpieceTokenizer) -> Wordpieces:
    """(title_ids, body_ids) `RaggedColumn`s [N, (T)] without specials, in `tokenizer`'s
    vocabulary: the stored ones where `stored_wordpieces_match`, else the blocks tokenized by
    `tokenizer`, once (module docstring)."""
    if self.stored_wordpieces_match(tokenizer):
      return self.title_ids, self.body_ids
    if self.title_ids is not None:
      logging.warning("corpus %s: its stored wordpieces are not the tokenizer's (another "
                      "vocabulary); tokenizing its %d blocks", self.source, len(self))
    return self._tokenized(tokenizer)

  def block_length(self, tokenizer: Optional[WordpieceTokenizer] = None) -> int:
    """The longest block, `[CLS] title [SEP] body [SEP]` in `wordpieces(tokenizer)` (None: the
    stored ones), as the manifest records it; measured (and recorded) where it does not."""
    if tokenizer is None or self.stored_wordpieces_match(tokenizer):
      name, (title_ids, body_ids) = corpus_files.PIPELINE_WORDPIECES, (self.title_ids,
                                                                       self.body_ids)
      if title_ids is None:
        raise ValueError(f"corpus {self.source!r}: no stored wordpieces; pass a tokenizer")
    else:
      name, (title_ids, body_ids) = "wordpieces-" + _vocab_digest(tokenizer), self.wordpieces(
          tokenizer)
    lengths = self.__dict__.setdefault("_block_lengths", {})
    if name not in lengths and self.directory is not None:
      lengths[name] = corpus_files.read_manifest(self.directory).get("block_lengths", {}).get(name)
    if lengths.get(name) is None:
      lengths[name] = int(np.max(title_ids.row_lengths() + body_ids.row_lengths())) + 3
      if self.directory is not None and _writable(self.directory):
        corpus_files.record_block_length(self.directory, name, lengths[name])
    return lengths[name]

  def _tokenized(self, tokenizer: WordpieceTokenizer) -> Wordpieces:
    name = "wordpieces-" + _vocab_digest(tokenizer)
    cache = self.__dict__.setdefault("_tokenized_sets", {})
    if name in cache:
      return cache[name]
    if self.directory is None:
      parts = list(_tokenized_batches(tokenizer, self.titles, self.texts))
      pieces = tuple(RaggedColumn.from_ragged(tf.concat([p[i] for p in parts], axis=0))
                     for i in range(2))
    else:
      manifest = corpus_files.read_manifest(self.directory)
      if name not in manifest["wordpieces"]:
        corpus_files.add_wordpieces(self.directory, name, _tokenized_batches(
            tokenizer, self.titles, self.texts), tokenizer.vocab_size)
        manifest = corpus_files.read_manifest(self.directory)
      pieces = corpus_files.open_wordpieces(self.directory, manifest, name)
    cache[name] = pieces
    return pieces

  @classmethod
  def from_blocks(cls, block_ids: Sequence[int], titles: Sequence[str], texts: Sequence[str],
                  title_ids: Optional[Sequence[Sequence[int]]] = None,
                  body_ids: Optional[Sequence[Sequence[int]]] = None,
                  source: str = "") -> "Corpus":
    """Builds a corpus in memory from unordered blocks (wordpieces optional); duplicate ids are
    an `InputError`."""
    ids = np.asarray(block_ids, np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if len(ids) > 1 and np.any(np.diff(ids) == 0):
      raise errors.InputError(errors.describe(
          source or "corpus", f"duplicate block ids {ids[1:][np.diff(ids) == 0][:10].tolist()}",
          "Give each block its own id (a JSONL corpus may leave the ids out)"))
    pick = lambda seq: [seq[i] for i in order]
    wordpieces = (None, None) if title_ids is None else (
        RaggedColumn.from_rows(pick(list(title_ids))), RaggedColumn.from_rows(pick(list(body_ids))))
    return cls(ids, pick(list(titles)), pick(list(texts)), source, *wordpieces)

  @classmethod
  def open(cls, directory: str) -> "Corpus":
    """Opens an on-disk corpus directory (`retrieval.corpus_files`), memory-mapped."""
    manifest, block_ids, titles, texts = corpus_files.open_corpus(directory)
    stored = (None, None)
    if corpus_files.PIPELINE_WORDPIECES in manifest["wordpieces"]:
      stored = corpus_files.open_wordpieces(directory, manifest,
                                            corpus_files.PIPELINE_WORDPIECES)
    source = manifest["source"].get("path", directory)
    return cls(block_ids, titles, texts, source, *stored, directory=directory,
               fingerprint=manifest["fingerprint"])

  @classmethod
  def load(cls, path: str, cache_dir: Optional[str] = None) -> "Corpus":
    """Opens the corpus at `path`: a corpus directory, or an input converted once (module
    docstring): a `blocks-*.tfrecord` directory, a JSONL or a DPR TSV file, or Google's
    released `blocks.tfr` (with its `titles.tfr` and `examples.tfr`).

    Raises:
      FileNotFoundError: nothing at `path`, or a directory without block shards.
      InputError: a missing, damaged or miscounted shard (`realm_tf.data.shards`) or corpus
        file (`retrieval.corpus_files`), an empty corpus or duplicate ids.
      MalformedRecordError: a malformed line in a JSONL/TSV corpus.
    """
    if tf.io.gfile.isdir(path) and corpus_files.is_corpus_dir(path):
      return cls.open(path)
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(errors.describe(
          path, "no corpus at this path", "Pass a corpus directory, a blocks-*.tfrecord "
          "directory (python -m pipelines.wikipedia_to_blocks), a JSONL file of "
          "{id, title, text}, a DPR TSV file or a released blocks.tfr"))
    source = corpus_sources.describe_source(path)
    target = _conversion_dir(path, source, cache_dir)
    if corpus_files.is_corpus_dir(target):
      if corpus_files.read_manifest(target)["source"] == source:
        return cls.open(target)
      logging.info("corpus %s changed since %s was converted from it: converting again",
                   path, target)
      shutil.rmtree(target)
    return cls.open(convert(path, source, target))

  def write_jsonl(self, path: str) -> None:
    """Writes the blocks as JSONL (`{"id", "title", "text"}` a line; no wordpieces)."""
    with tf.io.gfile.GFile(path, "w") as f:
      for block_id, title, text in zip(self.block_ids, self.titles, self.texts):
        f.write(json.dumps({"id": int(block_id), "title": title, "text": text},
                           ensure_ascii=False) + "\n")


def _writable(directory: str) -> bool:
  parent = directory
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  return os.access(parent, os.W_OK)


def _conversion_dir(path: str, source, cache_dir: Optional[str]) -> str:
  """Where the corpus form of input `path` goes: beside it where writable, else the cache."""
  local = "://" not in path
  beside = os.path.join(path, "corpus") if source["kind"] == "shards" else path + ".corpus"
  if cache_dir is None and local and _writable(beside):
    return beside
  cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "realm_tf", "corpora")
  key = hashlib.sha256(source["path"].encode()).hexdigest()[:16]
  return os.path.join(cache_dir, f"{os.path.basename(path.rstrip('/'))}-{key}")


def convert(path: str, source, target: str) -> str:
  """Converts input `path` (described by `source`) into the corpus directory `target`,
  streaming; another process converting the same input at once is harmless (the first to
  finish wins). Stored wordpieces are kept as uint16, or int32 when an id does not fit.
  Returns `target`."""
  try:
    work = _write_converted(path, source, target, 1 << 16)
  except OverflowError:
    work = _write_converted(path, source, target, 1 << 31)
  try:
    os.rename(work, target)
  except OSError:
    if not corpus_files.is_corpus_dir(target):
      raise
    shutil.rmtree(work, ignore_errors=True)
  logging.info("Converted corpus %s into %s", path, target)
  store = Corpus.open(target)
  if store.title_ids is not None:
    store.block_length()  # recorded in its manifest
  return target


def _write_converted(path: str, source, target: str, vocab_size: int) -> str:
  work = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
  blocks = corpus_sources.read_blocks(path, source["kind"])
  first = next(blocks, None)
  with_wordpieces = first is not None and first.title_ids is not None
  writer = corpus_files.CorpusWriter(work, source, vocab_size if with_wordpieces else None)
  try:
    for block in ([first] if first is not None else []):
      writer.add(block.block_id, block.title, block.text, block.title_ids, block.body_ids)
    for block in blocks:
      writer.add(block.block_id, block.title, block.text, block.title_ids, block.body_ids)
    writer.close()
  except BaseException:
    writer.abort()
    raise
  return work
