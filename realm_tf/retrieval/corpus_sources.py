"""The inputs `Corpus.load` converts into the on-disk corpus form, read as streams of blocks.

* a directory of `blocks-*.tfrecord` shards (the corpus pipeline's output), verified by
  `realm_tf.data.shards.check_shards`; the blocks keep the pipeline's wordpieces;
* a JSONL file, one block a line: `{"title": ..., "text": ..., "id": optional int}`;
* a DPR passages TSV (`psgs_w100.tsv` form): `id<TAB>text<TAB>title`, an optional header line
  `id text title`;
* Google's released block records (`enwiki-20181220/blocks.tfr`, the ORQA/REALM release): a
  TFRecord file whose record i is the raw UTF-8 text of block i (the body: sentences joined by
  spaces, no title), read with the row-aligned `titles.tfr` (raw titles) and `examples.tfr`
  (`tf.train.Example`s of `title_ids` and `token_ids`, the release's own wordpieces) when they
  are beside it. Block ids are the record numbers, the rows of the release's `block_emb`.
Each reader yields `Block`s in file order (ids default to the line order among blocks); a
malformed line raises `errors.MalformedRecordError` naming file and line; a UTF-8 BOM is skipped.
"""
import csv
import dataclasses
import json
import os
from typing import Any, Dict, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.data import formats
from realm_tf.data import lone_surrogates
from realm_tf.data import shards

_SHARD_BATCH = 1024
_BOM = "\ufeff"
RELEASED_SUFFIX = ".tfr"
RELEASED_TITLES = "titles.tfr"
RELEASED_EXAMPLES = "examples.tfr"
_RELEASED_FEATURES = {"title_ids": tf.io.RaggedFeature(tf.int64),
                      "token_ids": tf.io.RaggedFeature(tf.int64)}


@dataclasses.dataclass
class Block:
  block_id: int
  title: str
  text: str
  title_ids: Optional[np.ndarray] = None
  body_ids: Optional[np.ndarray] = None


def describe_source(path: str) -> Dict[str, Any]:
  """What identifies an input: its path, and the size and modification time of the file, or of
  each `blocks*` file of a shard directory; a converted corpus records it."""
  path = os.path.abspath(path) if "://" not in path else path
  if tf.io.gfile.isdir(path):
    stats = {name: tf.io.gfile.stat(os.path.join(path, name))
             for name in tf.io.gfile.listdir(path)
             if name.startswith("blocks") and not name.endswith("/")}
    listing = sorted([name, stat.length, stat.mtime_nsec] for name, stat in stats.items())
    return {"path": path, "kind": "shards", "files": listing}
  stat = tf.io.gfile.stat(path)
  extension = os.path.splitext(path)[1].lower()
  if extension == RELEASED_SUFFIX:
    files = [[name, s.length, s.mtime_nsec] for name, s in
             ((name, tf.io.gfile.stat(p)) for name, p in _released_siblings(path).items() if p)]
    return {"path": path, "kind": "released", "bytes": stat.length, "mtime_ns": stat.mtime_nsec,
            "files": files}
  kind = "tsv" if extension in (".tsv", ".csv") else "jsonl"
  return {"path": path, "kind": kind, "bytes": stat.length, "mtime_ns": stat.mtime_nsec}


def read_blocks(path: str, kind: str) -> Iterator[Block]:
  """The blocks of input `path` of `kind` ("shards", "jsonl", "tsv", "released"), in file
  order."""
  return {"shards": _shard_blocks, "jsonl": _jsonl_blocks, "tsv": _tsv_blocks,
          "released": _released_blocks}[kind](path)


def _shard_blocks(corpus_dir: str) -> Iterator[Block]:
  files = shards.check_shards(corpus_dir, "blocks").files
  dataset = tf.data.TFRecordDataset(files).batch(_SHARD_BATCH).map(
      lambda s: tf.io.parse_example(s, formats.BLOCK_FEATURES))
  for batch in dataset:
    title_ids, body_ids = batch["title_ids"], batch["body_ids"]
    title_splits, body_splits = title_ids.row_splits.numpy(), body_ids.row_splits.numpy()
    title_values, body_values = title_ids.flat_values.numpy(), body_ids.flat_values.numpy()
    for i, (block_id, title, text) in enumerate(zip(batch["block_id"].numpy(),
                                                     batch["title"].numpy(),
                                                     batch["text"].numpy())):
      yield Block(int(block_id), title.decode("utf-8", "replace"), text.decode("utf-8", "replace"),
                  title_values[title_splits[i]:title_splits[i + 1]],
                  body_values[body_splits[i]:body_splits[i + 1]])


def _lines(path: str) -> Iterator[tuple]:
  """(line number, text) of every non-blank line; bytes that are not UTF-8 are an error
  naming the line."""
  with tf.io.gfile.GFile(path, "rb") as f:
    for number, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise errors.MalformedRecordError(path, number, f"not UTF-8 ({e.reason} at byte "
                                          f"{e.start})") from e
      if number == 1 and line.startswith(_BOM):
        line = line[1:]
      if line.strip():
        yield number, line.rstrip("\r\n")


def _jsonl_blocks(path: str) -> Iterator[Block]:
  count = 0
  for number, line in _lines(path):
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise errors.MalformedRecordError(path, number, f"not valid JSON ({e.msg})") from e
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
      raise errors.MalformedRecordError(path, number, 'expected an object with a string "text"')
    title = record.get("title", "")
    if not isinstance(title, str):
      raise errors.MalformedRecordError(path, number, f"title must be a string, got {title!r}")
    block_id = record.get("id", count)
    if isinstance(block_id, bool) or not isinstance(block_id, int) or not 0 <= block_id < 2**63:
      raise errors.MalformedRecordError(path, number,
                                        f"id must be an integer >= 0, got {block_id!r}")
    _check_encodable(path, number, title=title, text=record["text"])
    count += 1
    yield Block(block_id, title, record["text"])


def _tsv_blocks(path: str) -> Iterator[Block]:
  for number, line in _lines(path):
    fields: Sequence[str] = next(csv.reader([line], delimiter="\t"))
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
    if not 0 <= block_id < 2**63:
      raise errors.MalformedRecordError(path, number, f"id must be >= 0, got {block_id}")
    yield Block(block_id, fields[2], fields[1])


def _check_encodable(path: str, number: int, **strings: str) -> None:
  """Refuses a lone surrogate (`data.lone_surrogates`) in the named JSON strings."""
  for field, string in strings.items():
    surrogate = lone_surrogates.problem(string, f'"{field}"')
    if surrogate:
      raise errors.MalformedRecordError(path, number, f"{surrogate}. {lone_surrogates.FIX}")


def _released_siblings(path: str) -> Dict[str, Optional[str]]:
  """{file name: path, or None where absent} of the files read with a released `blocks.tfr`."""
  directory = os.path.dirname(path)
  siblings = {name: os.path.join(directory, name) for name in (RELEASED_TITLES, RELEASED_EXAMPLES)}
  return {name: p if tf.io.gfile.exists(p) else None for name, p in siblings.items()}


def _records(path: str, parse=None) -> Iterator[Any]:
  """The records of a TFRecord file, one at a time (parsed by `parse` in batches)."""
  dataset = tf.data.TFRecordDataset(path).batch(_SHARD_BATCH)
  if parse is not None:
    dataset = dataset.map(parse)
  for batch in dataset:
    if parse is None:
      yield from batch.numpy()
    else:
      title_ids, token_ids = batch["title_ids"], batch["token_ids"]
      title_splits, token_splits = title_ids.row_splits.numpy(), token_ids.row_splits.numpy()
      title_values, token_values = title_ids.flat_values.numpy(), token_ids.flat_values.numpy()
      for i in range(len(title_splits) - 1):
        yield (title_values[title_splits[i]:title_splits[i + 1]],
               token_values[token_splits[i]:token_splits[i + 1]])


def _decoded(path: str, record: int, raw: bytes) -> str:
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.MalformedRecordError(path, record, f"record is not UTF-8 ({e.reason} at byte "
                                      f"{e.start})") from e


def _released_blocks(path: str) -> Iterator[Block]:
  siblings = _released_siblings(path)
  titles_path, examples_path = siblings[RELEASED_TITLES], siblings[RELEASED_EXAMPLES]
  titles = _records(titles_path) if titles_path else None
  examples = (_records(examples_path, lambda s: tf.io.parse_example(s, _RELEASED_FEATURES))
              if examples_path else None)

  def aligned(stream, other: str, row: int):
    value = next(stream, None)
    if value is None:
      raise errors.InputError(errors.describe(
          other, f"has {row} records, but {path} has more",
          "Use the files of one release, each block's record at the same position"))
    return value

  count = 0
  for row, raw in enumerate(_records(path)):
    title = _decoded(titles_path, row + 1, aligned(titles, titles_path, row)) if titles else ""
    title_ids = body_ids = None
    if examples is not None:
      title_ids, body_ids = aligned(examples, examples_path, row)
    yield Block(row, title, _decoded(path, row + 1, raw), title_ids, body_ids)
    count = row + 1
  for stream, other in ((titles, titles_path), (examples, examples_path)):
    if stream is not None and next(stream, None) is not None:
      raise errors.InputError(errors.describe(
          other, f"has more records than the {count} of {path}",
          "Use the files of one release, each block's record at the same position"))
