"""The on-disk block embeddings of an index version: `block_embeddings.npy`, memory-mapped.

Row r of the [N, D] `.npy` (C order) is the doc-tower embedding of corpus row r, stored as
float32, bfloat16 or float16 (`STORAGE_DTYPES`: 4, 2 or 2 bytes a value; REALM's 13.3M blocks
of D=128 take 6.8, 3.4 or 3.4 GB). bfloat16, which `.npy` cannot describe, is stored as its
uint16 bits and read back as ml_dtypes' bfloat16. The version's manifest metadata records the
storage dtype ("embedding_storage_dtype") and the file's sha256 ("embedding_sha256").

Nothing holds a second full copy: `create` gives a writable memmap that `embed_blocks(out=...)`
fills batch by batch, `open_embeddings` maps the file read-only, and `gather` reads as float32
only the rows a caller needs (fine-tuning: the top K of B questions a step). `move_into` puts
the file, written as a `*.tmp-*` name beside the version, into it before the index files and
manifest, so that a published version is complete.
"""
import os
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.mips import manifest as manifest_lib

EMBEDDING_FILE = "block_embeddings.npy"
STORAGE_DTYPES = ("float32", "bfloat16", "float16")
STORAGE_KEY = "embedding_storage_dtype"
SHA256_KEY = "embedding_sha256"
# What the .npy file holds for each storage dtype.
_FILE_DTYPES = {"float32": np.dtype("<f4"), "bfloat16": np.dtype("<u2"),
                "float16": np.dtype("<f2")}


def check_storage_dtype(storage_dtype: str) -> str:
  """`storage_dtype`, if one of `STORAGE_DTYPES` (else a ValueError naming them)."""
  if storage_dtype not in STORAGE_DTYPES:
    raise ValueError(f"embedding storage dtype must be one of {', '.join(STORAGE_DTYPES)}, "
                     f"got {storage_dtype!r}")
  return storage_dtype


def bytes_per_block(dim: int, storage_dtype: str) -> int:
  """Bytes one block's embedding takes on disk (and in memory once all its pages are read)."""
  return dim * _FILE_DTYPES[check_storage_dtype(storage_dtype)].itemsize


def _values(array: np.ndarray, storage_dtype: str) -> np.ndarray:
  """The file's array as the storage dtype's values (bfloat16: a view of the uint16 bits)."""
  return array.view(tf.bfloat16.as_numpy_dtype) if storage_dtype == "bfloat16" else array


def create(path: str, num_blocks: int, dim: int, storage_dtype: str) -> np.ndarray:
  """A new [N, D] embeddings file at `path` (a local path), mapped writable: fill it (e.g.
  `embed_blocks(out=...)`), then `flush` it."""
  file_dtype = _FILE_DTYPES[check_storage_dtype(storage_dtype)]
  array = np.lib.format.open_memmap(path, mode="w+", dtype=file_dtype,
                                    shape=(num_blocks, dim))
  return _values(array, storage_dtype)


def _header(path: str) -> Tuple[Tuple[int, ...], np.dtype, bool, int]:
  """(shape, dtype, fortran_order, data offset) of the `.npy` file at `path`."""
  with open(path, "rb") as f:
    version = np.lib.format.read_magic(f)
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, fortran_order, dtype = read(f)
    return shape, dtype, fortran_order, f.tell()


def open_embeddings(path: str, storage_dtype: str, num_blocks: Optional[int] = None,
                    dim: Optional[int] = None) -> np.memmap:
  """The [N, D] embeddings in `path` memory-mapped read-only, in the storage dtype.

  Args:
    path: an embeddings file (a local path).
    storage_dtype: what the manifest says it holds (`STORAGE_DTYPES`).
    num_blocks, dim: the N and D it must have (None: any).

  Raises:
    InputError: (naming `path`) a missing, damaged or truncated file, or one of another
      dtype, row count or dimension.
  """
  file_dtype = _FILE_DTYPES[check_storage_dtype(storage_dtype)]
  fix = "Rebuild the index (it was damaged or replaced after it was written)"
  try:
    shape, dtype, fortran_order, offset = _header(path)
    size = os.path.getsize(path)
  except (OSError, ValueError, SyntaxError, EOFError) as e:
    raise errors.InputError(errors.describe(
        path, f"not a readable block-embeddings file ({e})", fix)) from e
  if dtype != file_dtype or fortran_order or len(shape) != 2:
    raise errors.InputError(errors.describe(
        path, f"holds a {'Fortran-order ' if fortran_order else ''}{dtype} array of shape "
        f"{shape}, not [N, D] {storage_dtype} embeddings ({file_dtype} values)", fix))
  if num_blocks is not None and shape[0] != num_blocks or dim is not None and shape[1] != dim:
    raise errors.InputError(errors.describe(
        path, f"{shape[0]} embeddings of dimension {shape[1]}, but the index has "
        f"{num_blocks} blocks of dimension {dim}", fix))
  expected = offset + shape[0] * shape[1] * file_dtype.itemsize
  if size != expected:
    raise errors.InputError(errors.describe(
        path, f"{size} bytes, but a [{shape[0]}, {shape[1]}] {file_dtype} array takes "
        f"{expected}: truncated or damaged", fix))
  return _values(np.load(path, mmap_mode="r"), storage_dtype)


def metadata(path: str, storage_dtype: str) -> Dict[str, Any]:
  """The manifest metadata of the embeddings file at `path`: storage dtype and sha256."""
  return {STORAGE_KEY: check_storage_dtype(storage_dtype), SHA256_KEY: manifest_lib.sha256_file(path)}


def _edited_field(path: str, storage_dtype: str, num_blocks: int, dim: int) -> str:
  """Which manifest field disagrees with the (intact) embeddings file at `path`."""
  shape, dtype = _header(path)[:2]
  if _FILE_DTYPES.get(storage_dtype) != dtype:
    return f"{STORAGE_KEY} is {storage_dtype!r}, but {EMBEDDING_FILE} holds {dtype} values"
  if shape[0] != num_blocks:
    return f"num_docs is {num_blocks}, but {EMBEDDING_FILE} holds {shape[0]} rows"
  return f"dim is {dim}, but {EMBEDDING_FILE} holds dimension {shape[1]}"


def open_in(directory: str, index_metadata: Mapping[str, Any], num_blocks: int, dim: int,
            verify_checksum: bool = True) -> Optional[np.memmap]:
  """The embeddings file of the index version in `directory`, memory-mapped (`open_embeddings`),
  its sha256 checked against `index_metadata` unless `verify_checksum` is False; None where the
  version has none (an index published without one, e.g. by pre-training)."""
  path = os.path.join(directory, EMBEDDING_FILE)
  if not os.path.exists(path):
    return None
  storage = str(index_metadata.get(STORAGE_KEY, "float32"))
  expected = index_metadata.get(SHA256_KEY)
  try:
    embeddings = open_embeddings(path, storage, num_blocks, dim)
  except ValueError as e:
    intact = expected and manifest_lib.sha256_file(path) == expected
    if storage in STORAGE_DTYPES and not intact:
      raise  # the file is damaged
    raise manifest_lib.IndexCorruptedError(  # the file as written: an edited manifest field
        directory, manifest_lib.MANIFEST_NAME, _edited_field(path, storage, num_blocks, dim)
    ) from e
  if verify_checksum and expected and manifest_lib.sha256_file(path) != expected:
    raise errors.InputError(errors.describe(
        path, f"block embeddings do not match their sha256 ({SHA256_KEY}) in the index manifest: "
        "the file is damaged, or the manifest was edited",
        "Rebuild the index (it was damaged or replaced after it was written)"))
  return embeddings


def gather(embeddings: np.ndarray, rows: np.ndarray) -> np.ndarray:
  """float32 [..., D] embeddings of corpus rows `rows` (int [...]; rows < 0: zeros), reading
  only those rows of `embeddings` [N, D]."""
  rows = np.asarray(rows, np.int64)
  found = rows >= 0
  out = np.zeros(rows.shape + (embeddings.shape[1],), np.float32)
  wanted = rows[found]
  unique, inverse = np.unique(wanted, return_inverse=True)  # sorted: sequential page reads
  out[found] = np.asarray(embeddings[unique], np.float32)[inverse.reshape(-1)]
  return out


def copy_rows(source: np.ndarray, path: str, storage_dtype: str,
              chunk: int = 1 << 16) -> np.ndarray:
  """A new embeddings file at `path` holding `source` [N, D] (any float array, e.g. a memmap
  of the released `block_emb`) in `storage_dtype`, written `chunk` rows at a time so no full
  copy is held; returns it mapped writable."""
  out = create(path, *source.shape, storage_dtype)
  for begin in range(0, len(source), chunk):
    out[begin:begin + chunk] = np.asarray(source[begin:begin + chunk],
                                          np.float32).astype(out.dtype)
  out.flush()
  return out


def as_float32(embeddings: np.ndarray) -> np.ndarray:
  """`embeddings` as float32: itself when it is float32 (a memmap stays one), else a copy."""
  return embeddings if embeddings.dtype == np.float32 else np.asarray(embeddings, np.float32)


def move_into(path: str, directory: str) -> str:
  """Moves the embeddings file at `path` into index directory `directory` (created) as
  `EMBEDDING_FILE`, before the index is written there (`index_publisher.publish` of a writer
  function): a published version then always holds its file. Returns the new path."""
  tf.io.gfile.makedirs(directory)
  target = os.path.join(directory, EMBEDDING_FILE)
  tf.io.gfile.rename(path, target, overwrite=True)
  return target
