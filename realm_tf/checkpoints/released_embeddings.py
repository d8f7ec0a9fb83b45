"""Precomputed block embeddings in the released forms, read by row without a full copy.

Legend: N blocks, D embedding dim.

* A TF1 checkpoint holding `block_emb` float32 [N, D]: the released REALM index
  (`cc_news_pretrained/embedder/encoded/encoded.ckpt`, 13,353,718 x 128, 6.8 GB), written by
  ORQA's `write_array_to_checkpoint`. Pass its prefix, or the directory holding it (the
  `checkpoint` state file in the released directory names an internal Google path, so the one
  `*.ckpt.index` there is used instead). A tensor bundle stores a float32 tensor as its raw
  little-endian bytes; a checkpoint of that variable alone is one data file of exactly those
  bytes, which is memory-mapped. A checkpoint holding more is read whole (`get_tensor`).
* A `.npy` file [N, D] (what HF's conversion scripts save), memory-mapped.

Rows are corpus rows: row r embeds record r of the released `blocks.tfr`.
"""
import os
from typing import Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import tf2_checkpoint

VARIABLE = "block_emb"
_FIX = ("Pass the released index checkpoint (cc_news_pretrained/embedder/encoded/encoded.ckpt) "
        "or a .npy file of float32 [N, D] block embeddings")


def checkpoint_prefix(path: str) -> str:
  """The checkpoint prefix at `path`: a prefix, or a directory with one `*.index` file."""
  if tf.io.gfile.exists(path + ".index"):
    return path
  if tf.io.gfile.isdir(path):
    indexes = [n for n in tf.io.gfile.listdir(path) if n.endswith(".index")]
    if len(indexes) == 1:
      return os.path.join(path, indexes[0][:-len(".index")])
    raise errors.InputError(errors.describe(
        path, f"{len(indexes)} checkpoint index files here, expected one",
        f"Pass the checkpoint prefix of `{VARIABLE}` (e.g. .../encoded/encoded.ckpt)"))
  raise FileNotFoundError(errors.describe(
      path, "no checkpoint or .npy file at this path",
      f"Pass a TF1 checkpoint holding `{VARIABLE}` (e.g. cc_news_pretrained/embedder/encoded/"
      "encoded.ckpt) or a .npy file of the block embeddings"))


def is_released_embeddings(path: str) -> bool:
  """Whether `path` is a `.npy` file or a checkpoint (prefix or directory) of `block_emb`."""
  if path.endswith(".npy"):
    return tf.io.gfile.exists(path)
  try:
    prefix = checkpoint_prefix(path)
  except (errors.InputError, FileNotFoundError):
    return False
  return VARIABLE in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()


def open_released_embeddings(path: str) -> Tuple[np.ndarray, str]:
  """(float32 [N, D] embeddings, memory-mapped where the file allows, the file they are in).

  Raises:
    InputError: no `block_emb` in the checkpoint, or not a float32 matrix.
  """
  if path.endswith(".npy"):
    embeddings = np.load(path, mmap_mode="r")
    source = path
  else:
    prefix = checkpoint_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    if VARIABLE not in shapes:
      raise errors.InputError(errors.describe(
          prefix, f"no `{VARIABLE}` variable (it holds {sorted(shapes)[:5]})",
          "Pass the released index checkpoint (cc_news_pretrained/embedder/encoded/encoded.ckpt)"))
    shape, dtype = tuple(shapes[VARIABLE]), dtypes[VARIABLE]
    if dtype != tf.float32 or len(shape) != 2:
      raise errors.InputError(errors.describe(
          prefix, f"`{VARIABLE}` is {dtype.name} {list(shape)}, not a float32 [N, D] matrix",
          _FIX))
    source = f"{prefix}.data-00000-of-00001"
    nbytes = shape[0] * shape[1] * 4
    if (len(shapes) == 1 and tf.io.gfile.exists(source)
        and tf.io.gfile.stat(source).length == nbytes):
      embeddings = np.memmap(source, dtype="<f4", mode="r", shape=shape)
    else:
      logging.warning("%s holds more than %s: reading it whole (%.1f GB)", prefix, VARIABLE,
                      nbytes / 1e9)
      embeddings, source = tf2_checkpoint.tensor_getter(reader, prefix)(VARIABLE), prefix
  if embeddings.ndim != 2 or embeddings.dtype != np.float32:
    raise errors.InputError(errors.describe(
        path, f"embeddings are {embeddings.dtype} {list(embeddings.shape)}, not a float32 "
        "[N, D] matrix", _FIX))
  return embeddings, source
