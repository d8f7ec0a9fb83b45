"""The manifest of a saved MIPS index, and the error raised for a damaged index directory.

An index directory holds the implementation's files plus `manifest.json`:

    {"format_version": 1, "kind": "scann", "num_docs": 13353718, "dim": 128,
     "dtype": "float32", "builder": {...}, "files": {"dataset.npy": "<sha256>", ...}}

`save` writes the data files first and the manifest last, so a directory with a manifest is a
complete index; `load_index` checks the manifest, every checksum and the stored array shapes
before it builds anything, and reports any disagreement as `IndexCorruptedError`.
"""
import dataclasses
import hashlib
import json
import os
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
KINDS = ("brute_force", "scann", "sharded")
_READ_BLOCK_BYTES = 1 << 24


class IndexCorruptedError(errors.InputError):
  """A saved index directory is incomplete or does not match its manifest.

  Attributes:
    directory: the index directory.
    file_name: the offending file, relative to `directory`.
  """

  def __init__(self, directory: str, file_name: str, reason: str):
    super().__init__(errors.describe(
        os.path.join(directory, file_name), f"MIPS index is corrupted: {reason}",
        "Rebuild it (python -m pipelines.build_index), or publish an earlier complete version "
        "(index_publisher.repoint_latest)"))
    self.directory = directory
    self.file_name = file_name


def sha256_file(path: str) -> str:
  """The hex sha256 of the file at `path`, read in blocks."""
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    while block := f.read(_READ_BLOCK_BYTES):
      digest.update(block)
  return digest.hexdigest()


def _is_plain_name(name: Any) -> bool:
  return (isinstance(name, str) and name not in ("", ".", "..")
          and os.path.basename(name) == name and "\\" not in name)


@dataclasses.dataclass(frozen=True)
class IndexManifest:
  """Describes one saved index: what built it, its size, and a sha256 for each file.

  Attributes:
    kind: the implementation, one of `KINDS`.
    num_docs: N, the number of indexed documents.
    dim: D, the embedding dimension.
    builder: the implementation's resolved build parameters (JSON values).
    files: {file name relative to the index directory: hex sha256 of its bytes}.
    dtype: the embedding dtype, "float32".
    format_version: the layout version; `read` accepts only `FORMAT_VERSION`.
  """
  kind: str
  num_docs: int
  dim: int
  builder: Mapping[str, Any]
  files: Mapping[str, str]
  dtype: str = "float32"
  format_version: int = FORMAT_VERSION

  @classmethod
  def for_files(cls, directory: str, file_names: Iterable[str], *, kind: str, num_docs: int,
                dim: int, builder: Mapping[str, Any]) -> "IndexManifest":
    """Returns a manifest over `file_names` in `directory`, checksumming each file.

    Args:
      directory: the index directory the files were written to.
      file_names: names relative to `directory`.
      kind: the implementation, one of `KINDS`.
      num_docs: N.
      dim: D.
      builder: the resolved build parameters.
    """
    files = {name: sha256_file(os.path.join(directory, name)) for name in sorted(file_names)}
    return cls(kind=kind, num_docs=num_docs, dim=dim, builder=dict(builder), files=files)

  def write(self, directory: str) -> None:
    """Writes `manifest.json` into `directory`."""
    with tf.io.gfile.GFile(os.path.join(directory, MANIFEST_NAME), "w") as f:
      json.dump(dataclasses.asdict(self), f, indent=2, sort_keys=True)
      f.write("\n")

  @classmethod
  def read(cls, directory: str) -> "IndexManifest":
    """Reads and validates `directory/manifest.json` (checksums are checked by `verify`).

    Raises:
      IndexCorruptedError: the manifest is missing, is not JSON, or has missing, unknown or
        ill-typed fields, an unknown kind or an unsupported format version.
    """
    path = os.path.join(directory, MANIFEST_NAME)
    if not tf.io.gfile.exists(path):
      raise IndexCorruptedError(directory, MANIFEST_NAME, "missing")
    try:
      with tf.io.gfile.GFile(path, "r") as f:
        data = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
      raise IndexCorruptedError(directory, MANIFEST_NAME, f"not valid JSON ({e})") from e
    if not isinstance(data, dict):
      raise IndexCorruptedError(directory, MANIFEST_NAME, "not a JSON object")
    try:
      manifest = cls(**data)
    except TypeError as e:
      raise IndexCorruptedError(directory, MANIFEST_NAME, str(e)) from e
    problem = manifest._problem()
    if problem:
      raise IndexCorruptedError(directory, MANIFEST_NAME, problem)
    return manifest

  def _problem(self) -> Optional[str]:
    """Returns what is wrong with the field values, or None."""
    if self.format_version != FORMAT_VERSION:
      return f"format_version {self.format_version!r}, this code reads {FORMAT_VERSION}"
    if self.kind not in KINDS:
      return f"kind {self.kind!r} is not one of {KINDS}"
    for field in ("num_docs", "dim"):
      value = getattr(self, field)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return f"{field} {value!r} is not a positive integer"
    if self.dtype != "float32":
      return f"dtype {self.dtype!r} is not 'float32'"
    if not isinstance(self.builder, dict):
      return "builder is not a JSON object"
    if not isinstance(self.files, dict) or not all(
        _is_plain_name(name) and isinstance(sha, str) for name, sha in self.files.items()):
      return "files is not an object of {plain file name: sha256}"
    return None

  def verify(self, directory: str, checksums: bool = True) -> None:
    """Checks that every listed file exists and (with `checksums`) recomputes its sha256.

    Raises:
      IndexCorruptedError: a listed file is missing or its checksum differs.
    """
    for name, expected in sorted(self.files.items()):
      path = os.path.join(directory, name)
      if not tf.io.gfile.exists(path):
        raise IndexCorruptedError(directory, name, f"listed in {MANIFEST_NAME} but missing")
      if not checksums:
        continue
      actual = sha256_file(path)
      if actual != expected:
        raise IndexCorruptedError(
            directory, name, f"sha256 {actual} differs from {expected} in {MANIFEST_NAME}")

  def builder_param(self, directory: str, name: str, types: Tuple[type, ...]) -> Any:
    """Returns build parameter `name`, which must be an instance of one of `types`.

    Raises:
      IndexCorruptedError: the parameter is absent or has another type.
    """
    if name not in self.builder:
      raise IndexCorruptedError(directory, MANIFEST_NAME, f"builder parameter {name!r} missing")
    value = self.builder[name]
    if isinstance(value, bool) or not isinstance(value, types):
      raise IndexCorruptedError(directory, MANIFEST_NAME,
                                f"builder parameter {name!r} has an invalid value {value!r}")
    return value

  def load_bytes(self, directory: str, name: str) -> bytes:
    """Returns the bytes of listed file `name`."""
    self._check_listed(directory, name)
    with tf.io.gfile.GFile(os.path.join(directory, name), "rb") as f:
      return f.read()

  def load_array(self, directory: str, name: str, dtype: np.dtype,
                 shape: Optional[Sequence[Optional[int]]] = None) -> np.ndarray:
    """Returns listed `.npy` file `name`, checking its dtype and shape.

    Args:
      directory: the index directory.
      name: the file name relative to `directory`.
      dtype: the dtype the array must have.
      shape: the shape it must have; None entries match any size, None matches any shape.

    Raises:
      IndexCorruptedError: the file is unlisted, unreadable, or has another dtype or shape.
    """
    self._check_listed(directory, name)
    path = os.path.join(directory, name)
    try:
      if "://" in path:
        with tf.io.gfile.GFile(path, "rb") as f:
          array = np.load(f, allow_pickle=False)
      else:  # mapped: no read-and-copy of arrays of several GB (the caller copies once)
        try:
          array = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError:  # an empty array cannot be mapped; a damaged one fails again here
          array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as e:
      raise IndexCorruptedError(directory, name, f"not a readable .npy array ({e})") from e
    if array.dtype != dtype:
      raise IndexCorruptedError(directory, name, f"dtype {array.dtype}, expected {dtype}")
    if shape is not None and (len(array.shape) != len(shape) or any(
        want is not None and got != want for got, want in zip(array.shape, shape))):
      if tuple(shape) == (self.num_docs, self.dim) and array.ndim == 2:  # a field was edited
        field, value, got = next(f for f in zip(("num_docs", "dim"), shape, array.shape)
                                 if f[1] != f[2])
        raise IndexCorruptedError(directory, MANIFEST_NAME, f"{field} is {value}, but {name} "
                                  f"holds {got} {'rows' if field == 'num_docs' else 'columns'}")
      raise IndexCorruptedError(
          directory, name, f"shape {array.shape} disagrees with {MANIFEST_NAME} "
          f"(num_docs={self.num_docs}, dim={self.dim}): expected {tuple(shape)}")
    return array

  def _check_listed(self, directory: str, name: str) -> None:
    if name not in self.files:
      raise IndexCorruptedError(directory, name, f"a {self.kind!r} index (the kind in "
                                f"{MANIFEST_NAME}) needs it, but {MANIFEST_NAME} does not list it")


def save_array(directory: str, name: str, array: np.ndarray) -> None:
  """Writes `array` as `.npy` file `name` in `directory`."""
  with tf.io.gfile.GFile(os.path.join(directory, name), "wb") as f:
    np.save(f, array, allow_pickle=False)


def save_bytes(directory: str, name: str, data: bytes) -> None:
  """Writes `data` as file `name` in `directory`."""
  with tf.io.gfile.GFile(os.path.join(directory, name), "wb") as f:
    f.write(data)
