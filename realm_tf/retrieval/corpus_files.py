"""The on-disk corpus form: flat, memory-mapped columns and a manifest, written in one stream.

    corpus.json                 manifest: block count, fingerprint, source, each file's size
                                and crc32c, the wordpiece sets
    block_ids.npy               int64 [N], strictly increasing (row r = r-th smallest id)
    titles.bin, titles.npy      UTF-8 bytes of all titles, and their int64 offsets [N + 1]
    texts.bin, texts.npy        likewise for the texts
    <set>/{title,body}_ids.bin, .npy   a wordpiece set (uint16 ids where the vocabulary fits,
                                else int32, and offsets): "wordpieces" the pipeline's own,
                                "wordpieces-<digest>" another vocabulary's, cached
Opening checks sizes and the offsets' ends (O(1)); `verify_checksums` reads everything.
`CorpusWriter.close` orders the rows by id, computes the fingerprint and writes the manifest
last, so that a directory without `corpus.json` is never read as a corpus.
"""
import array
import hashlib
import json
import mmap
import os
import shutil
import uuid
from typing import Any, Dict, Iterable, Optional, Tuple

import google_crc32c
import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.retrieval.columns import RaggedColumn
from realm_tf.retrieval.columns import StringColumn
from realm_tf.retrieval.fingerprint import block_digest

MANIFEST = "corpus.json"
FORMAT_VERSION = 1
PIPELINE_WORDPIECES = "wordpieces"
_WORDPIECE_FIELDS = ("title_ids", "body_ids")
_CHUNK = 1 << 20  # rows per chunk of the permutation and fingerprint passes


def wordpiece_dtype(vocab_size: Optional[int]) -> np.dtype:
  """uint16 where every id < 65,536 fits, else int32."""
  return np.dtype(np.uint16 if vocab_size is not None and vocab_size <= 1 << 16 else np.int32)


def is_corpus_dir(directory: str) -> bool:
  return os.path.isfile(os.path.join(directory, MANIFEST))


def _crc(path: str) -> str:
  checksum = google_crc32c.Checksum()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 24), b""):
      checksum.update(chunk)
  return checksum.digest().hex()


def _map(path: str, dtype, count: int) -> np.ndarray:
  """A read-only map of the `count` values of file `path` (an empty array for 0: mmap needs a
  byte). Rows are read at random (candidates, length-ordered embedding), so the kernel is told
  not to read ahead around them: no page cache is filled, or resident memory counted, for
  neighbours nobody asked for."""
  if not count:
    return np.zeros([0], dtype)
  with open(path, "rb") as f:
    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  mapped.madvise(mmap.MADV_RANDOM)
  return np.frombuffer(mapped, dtype, count)


def is_mapped(array: np.ndarray) -> bool:
  """Whether `array` reads a file map (`_map`) rather than memory of its own."""
  return isinstance(getattr(array.base, "obj", None), mmap.mmap)


class _ColumnWriter:
  """Appends rows of one column: values to `<name>.bin`, offsets kept as int64."""

  def __init__(self, directory: str, name: str, dtype):
    self.name, self.dtype = name, np.dtype(dtype)
    self.path = os.path.join(directory, name)
    self._file = open(self.path + ".bin", "wb")  # pylint: disable=consider-using-with
    self._offsets, self._end = array.array("q", [0]), 0

  def _cast(self, values) -> np.ndarray:
    values = np.asarray(values)
    if (self.dtype == np.uint16 and values.dtype not in (np.uint8, np.uint16) and values.size and
        (values.max() >= 1 << 16 or values.min() < 0)):
      raise OverflowError(f"{self.path}: wordpiece id {values.max()} does not fit uint16")
    return values.astype(self.dtype, copy=False)

  def add(self, row) -> None:
    data = row if isinstance(row, bytes) else self._cast(row).tobytes()
    self._file.write(data)
    self._end += len(data) // self.dtype.itemsize
    self._offsets.append(self._end)

  def add_rows(self, values: np.ndarray, lengths: np.ndarray) -> None:
    """Appends len(lengths) rows whose values are `values`, concatenated."""
    self._file.write(self._cast(values).tobytes())
    self._offsets.frombytes((self._end + np.cumsum(lengths, dtype=np.int64)).tobytes())
    self._end += int(np.sum(lengths))

  def close(self, order: Optional[np.ndarray]) -> None:
    """Writes the offsets; with `order`, rewrites the rows in that order first."""
    self._file.close()
    offsets = np.frombuffer(self._offsets, np.int64)
    if order is not None:
      values = _map(self.path + ".bin", self.dtype, self._end)
      lengths = np.diff(offsets)[order]
      with open(self.path + ".bin.sorted", "wb") as out:
        for start in range(0, len(order), _CHUNK):
          for r in order[start:start + _CHUNK]:
            out.write(values[offsets[r]:offsets[r + 1]].tobytes())
      del values
      os.replace(self.path + ".bin.sorted", self.path + ".bin")
      offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(self.path + ".npy", offsets)


class CorpusWriter:
  """Writes a corpus directory from blocks given one at a time, in any id order.

  Args:
    directory: created (must not hold a corpus already).
    source: provenance recorded in the manifest (e.g. the input path, its size and mtime).
    vocab_size: the vocabulary of the wordpieces given to `add` (picks their dtype); None
      when no wordpieces are given.
  """

  def __init__(self, directory: str, source: Dict[str, Any], vocab_size: Optional[int] = None):
    os.makedirs(directory, exist_ok=True)
    if is_corpus_dir(directory):
      raise FileExistsError(f"{directory}: already holds a corpus ({MANIFEST})")
    self.directory, self.source = directory, dict(source)
    self._ids = array.array("q")
    self._digests = open(os.path.join(directory, "digests.tmp"), "wb")  # pylint: disable=consider-using-with
    self._strings = [_ColumnWriter(directory, n, np.uint8) for n in ("titles", "texts")]
    self._wordpieces = None
    if vocab_size is not None:
      os.makedirs(os.path.join(directory, PIPELINE_WORDPIECES), exist_ok=True)
      self._wordpieces = [_ColumnWriter(os.path.join(directory, PIPELINE_WORDPIECES), n,
                                        wordpiece_dtype(vocab_size)) for n in _WORDPIECE_FIELDS]

  def add(self, block_id: int, title: str, text: str, title_ids=None, body_ids=None) -> None:
    self._ids.append(block_id)
    self._digests.write(block_digest(title, text))
    for column, value in zip(self._strings, (title, text)):
      column.add(value.encode("utf-8"))
    if self._wordpieces is not None:
      for column, value in zip(self._wordpieces, (title_ids, body_ids)):
        column.add(value)

  def close(self) -> str:
    """Orders the rows, writes the manifest; returns the fingerprint."""
    self._digests.close()
    ids = np.frombuffer(self._ids, np.int64)
    order = None
    if len(ids) > 1 and np.any(np.diff(ids) <= 0):
      order = np.argsort(ids, kind="stable")
      ids = ids[order]
      repeated = ids[1:][np.diff(ids) == 0]
      if repeated.size:
        self.abort()
        raise errors.InputError(errors.describe(
            self.source.get("path", "corpus"), f"duplicate block ids {repeated[:10].tolist()}",
            "Give each block its own id (a JSONL corpus may leave the ids out)"))
    if not len(ids):
      self.abort()
      raise errors.InputError(errors.describe(self.source.get("path", "corpus"),
                                              "the corpus has no blocks",
                                              "Pass a corpus with at least one block"))
    np.save(os.path.join(self.directory, "block_ids.npy"), ids)
    fingerprint = self._fingerprint(ids, order)
    for column in self._strings + (self._wordpieces or []):
      column.close(order)
    sets = {}
    if self._wordpieces is not None:
      sets[PIPELINE_WORDPIECES] = str(self._wordpieces[0].dtype)
    write_manifest(self.directory, len(ids), fingerprint, self.source, sets)
    return fingerprint

  def abort(self) -> None:
    """Removes what was written."""
    for f in [self._digests] + [c._file for c in self._strings + (self._wordpieces or [])]:  # pylint: disable=protected-access
      f.close()
    shutil.rmtree(self.directory, ignore_errors=True)

  def _fingerprint(self, ids: np.ndarray, order: Optional[np.ndarray]) -> str:
    """`fingerprint.fingerprint_digests`, streamed: sha256 of (id, digest) records by id."""
    path = os.path.join(self.directory, "digests.tmp")
    digests = _map(path, "S32", len(ids))
    digest = hashlib.sha256()
    for start in range(0, len(ids), _CHUNK):
      stop = min(start + _CHUNK, len(ids))
      records = np.zeros(stop - start, [("id", "<i8"), ("digest", "S32")])
      records["id"] = ids[start:stop]
      records["digest"] = digests[order[start:stop]] if order is not None else digests[start:stop]
      digest.update(records.tobytes())
    del digests
    os.remove(path)
    return digest.hexdigest()


def _file_entries(directory: str, names, known: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
  """Size and crc32c of each file, taken from `known` where listed there already."""
  return {name: known.get(name) or {"bytes": os.path.getsize(os.path.join(directory, name)),
                                    "crc32c": _crc(os.path.join(directory, name))}
          for name in names}


def _column_files(prefix: str, fields) -> list:
  return [f"{prefix}{field}{suffix}" for field in fields for suffix in (".bin", ".npy")]


def write_manifest(directory: str, num_blocks: int, fingerprint: str, source: Dict[str, Any],
                   wordpiece_sets: Dict[str, str], known: Optional[Dict[str, Any]] = None,
                   block_lengths: Optional[Dict[str, int]] = None) -> None:
  """Writes `corpus.json` (atomically) over the files present (`known`: entries of files
  already checksummed); `block_lengths`: the longest block of each wordpiece set."""
  names = ["block_ids.npy"] + _column_files("", ("titles", "texts"))
  for name in wordpiece_sets:
    names += _column_files(name + "/", _WORDPIECE_FIELDS)
  manifest = {"format": "realm_tf.corpus", "format_version": FORMAT_VERSION,
              "num_blocks": int(num_blocks), "fingerprint": fingerprint, "source": source,
              "wordpieces": wordpiece_sets,
              "files": _file_entries(directory, names, known or {}),
              "block_lengths": dict(block_lengths or {})}
  _write_json(directory, manifest)


def record_block_length(directory: str, name: str, length: int) -> None:
  """Records `length`, the longest `[CLS] title [SEP] body [SEP]` of wordpiece set `name`, in
  the manifest (a corpus written before it was recorded is measured when opened)."""
  manifest = read_manifest(directory)
  manifest.setdefault("block_lengths", {})[name] = int(length)
  _write_json(directory, manifest)


def _write_json(directory: str, manifest: Dict[str, Any]) -> None:
  path = os.path.join(directory, MANIFEST)
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
  os.replace(path + ".tmp", path)


def read_manifest(directory: str) -> Dict[str, Any]:
  path = os.path.join(directory, MANIFEST)
  try:
    with open(path, encoding="utf-8") as f:
      manifest = json.load(f)
  except (OSError, ValueError) as e:
    raise errors.InputError(errors.describe(path, f"unreadable corpus manifest ({e})",
                                            "Rebuild the corpus directory")) from e
  if manifest.get("format") != "realm_tf.corpus" or manifest.get(
      "format_version") != FORMAT_VERSION:
    raise errors.InputError(errors.describe(path, "not a realm_tf corpus manifest of format "
                                            f"version {FORMAT_VERSION}",
                                            "Rebuild the corpus directory"))
  return manifest


def _damaged(directory: str, name: str, problem: str) -> errors.InputError:
  return errors.InputError(errors.describe(
      os.path.join(directory, name), problem,
      f"Rebuild the corpus directory {directory} (delete it; Corpus.load converts the source "
      "again)"))


def _check_size(directory: str, manifest: Dict[str, Any], name: str) -> None:
  expected = manifest["files"].get(name, {}).get("bytes")
  path = os.path.join(directory, name)
  if expected is None:
    raise _damaged(directory, name, "not listed in corpus.json")
  if not os.path.isfile(path):
    raise _damaged(directory, name, "missing")
  size = os.path.getsize(path)
  if size != expected:
    raise _damaged(directory, name, f"{size} bytes, corpus.json lists {expected}")


def open_column(directory: str, manifest: Dict[str, Any], name: str, dtype, num_rows: int,
                kind=RaggedColumn):
  """Memory-maps column `name` (`<name>.bin` values, `<name>.npy` offsets), checked against
  the manifest's sizes and its own offsets."""
  for suffix in (".bin", ".npy"):
    _check_size(directory, manifest, name + suffix)
  try:
    offsets = np.load(os.path.join(directory, name + ".npy"), mmap_mode="r")
  except ValueError as e:
    raise _damaged(directory, name + ".npy", f"not a .npy array ({e})") from e
  itemsize = np.dtype(dtype).itemsize
  values_bytes = manifest["files"][name + ".bin"]["bytes"]
  if offsets.shape != (num_rows + 1,) or offsets.dtype != np.int64:
    raise _damaged(directory, name + ".npy", f"offsets {offsets.dtype}{list(offsets.shape)}, "
                   f"expected int64[{num_rows + 1}]")
  if int(offsets[0]) != 0 or int(offsets[-1]) * itemsize != values_bytes:
    raise _damaged(directory, name + ".bin", f"{values_bytes} bytes of values, the offsets "
                   f"end at {int(offsets[-1])} values of {itemsize} bytes")
  values = _map(os.path.join(directory, name + ".bin"), dtype, values_bytes // itemsize)
  return kind(values, offsets)


def open_corpus(directory: str) -> Tuple[Dict[str, Any], np.ndarray, StringColumn,
                                           StringColumn]:
  """(manifest, block ids int64 [N], titles, texts) of a corpus directory, memory-mapped."""
  manifest = read_manifest(directory)
  num_blocks = int(manifest["num_blocks"])
  _check_size(directory, manifest, "block_ids.npy")
  block_ids = np.load(os.path.join(directory, "block_ids.npy"), mmap_mode="r")
  if block_ids.shape != (num_blocks,):
    raise _damaged(directory, "block_ids.npy",
                   f"{block_ids.shape} ids, corpus.json counts {num_blocks} blocks")
  titles, texts = (open_column(directory, manifest, name, np.uint8, num_blocks, StringColumn)
                   for name in ("titles", "texts"))
  return manifest, block_ids, titles, texts


def open_wordpieces(directory: str, manifest: Dict[str, Any],
                    name: str) -> Tuple[RaggedColumn, RaggedColumn]:
  """The (title_ids, body_ids) columns of wordpiece set `name`."""
  dtype = np.dtype(manifest["wordpieces"][name])
  return tuple(open_column(directory, manifest, f"{name}/{field}", dtype,
                           int(manifest["num_blocks"])) for field in _WORDPIECE_FIELDS)


def add_wordpieces(directory: str, name: str, batches: Iterable[Tuple[tf.RaggedTensor,
                                                                     tf.RaggedTensor]],
                   vocab_size: int) -> None:
  """Writes wordpiece set `name` from (title_ids, body_ids) batches [B, (T)] in row order,
  streaming, and adds it to the manifest."""
  manifest = read_manifest(directory)
  dtype = wordpiece_dtype(vocab_size)
  shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
  os.makedirs(os.path.join(directory, name))
  columns = [_ColumnWriter(os.path.join(directory, name), field, dtype)
             for field in _WORDPIECE_FIELDS]
  for batch in batches:
    for column, ragged in zip(columns, batch):
      column.add_rows(ragged.flat_values.numpy(), ragged.row_lengths().numpy())
  for column in columns:
    column.close(None)
  if any(len(c._offsets) - 1 != manifest["num_blocks"] for c in columns):  # pylint: disable=protected-access
    raise ValueError(f"{directory}: wordpieces of another number of blocks")
  sets = dict(manifest["wordpieces"], **{name: str(dtype)})
  write_manifest(directory, manifest["num_blocks"], manifest["fingerprint"], manifest["source"],
                 sets, manifest["files"], manifest.get("block_lengths"))


def verify_checksums(directory: str) -> None:
  """Reads every file of the corpus directory against the manifest's crc32c."""
  manifest = read_manifest(directory)
  for name, entry in sorted(manifest["files"].items()):
    _check_size(directory, manifest, name)
    found = _crc(os.path.join(directory, name))
    if found != entry["crc32c"]:
      raise _damaged(directory, name, f"crc32c {found}, corpus.json lists {entry['crc32c']}")


def copy_corpus(source: str, target: str) -> None:
  """Copies corpus directory `source` (the files its manifest lists, and the manifest) to
  `target`, hard-linked where both are on one file system: every file is written once and
  replaced, never changed in place. Through a temporary directory renamed at the end."""
  manifest = read_manifest(source)
  work = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
  for name in sorted(manifest["files"]) + [MANIFEST]:
    os.makedirs(os.path.dirname(os.path.join(work, name)), exist_ok=True)
    try:
      os.link(os.path.join(source, name), os.path.join(work, name))
    except OSError:  # another file system
      shutil.copyfile(os.path.join(source, name), os.path.join(work, name))
  if os.path.isdir(target):
    shutil.rmtree(target)
  os.rename(work, target)
