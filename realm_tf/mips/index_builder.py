"""What every index builder builds: an exact index, or ScaNN with the user's settings, in shards.

Legend: N documents, D embedding dimension, L tree leaves, M rows per shard, S shards.

`ScannSettings` (ScaNN's knobs) and `Sharding` (rows per shard, either kind) are the settings of
every index-building binary (`realm_tf.cli.define_index_flags`); errors here name the setting
(`ScannSettings.num_leaves`), a binary its flag. ScaNN's defaults: L = round(sqrt(N)) leaves
from N >= 10,000 documents (exact below), ceil(L / 20) searched, 2 dimensions per hashing block,
100 candidates re-scored; `FULL_WIKIPEDIA` is the reference REALM's 1000 leaves, 100 searched.

N > M rows make a `ShardedIndex` of S = ceil(N / M) consecutive row ranges (M by default
ceil(N / 8) within [100,000, `DEFAULT_SHARD_SIZE`]). `save_index` builds, saves and frees one
shard at a time, so the builder's memory grows with M, not N: ScaNN's build of a shard peaks
near 8.5x its float32 bytes (docs/pipelines.md, BENCHMARKS.md §9).
"""
import dataclasses
import math
import mmap
import os
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.mips.scann_index import MIN_DOCS_FOR_PARTITIONING
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.mips.sharded_index import ShardedIndex

KINDS = ("scann", "brute_force")
DEFAULT_SHARD_SIZE = 1_000_000  # rows: 0.5 GiB of float32 128-d embeddings per shard
AUTO_SHARDS = 8
MIN_AUTO_SHARD_SIZE = 100_000
_DEFAULT_NUM_NEIGHBORS = 8


def _setting(settings: Any, name: str) -> str:
  """How errors name field `name` of a settings dataclass, e.g. "ScannSettings.num_leaves"."""
  return f"{type(settings).__name__}.{name}"


def _check_integers(settings: Any, least: Dict[str, int]) -> None:
  """Raises InputError unless each field of `settings` named in `least` is an int >= least."""
  for name, minimum in least.items():
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
      raise errors.InputError(errors.describe(
          _setting(settings, name), f"{value!r} is not an integer >= {minimum}", _fix(name)))


@dataclasses.dataclass(frozen=True)
class Sharding:
  """How the N rows of an index of either kind are split into shards (module docstring).

  Attributes:
    shard_size: M, the most rows per shard; 0: the automatic rule (`shard_size_for`).

  Raises:
    InputError: a negative or non-integer shard size.
  """
  shard_size: int = 0

  def __post_init__(self):
    _check_integers(self, {"shard_size": 0})

  def shard_size_for(self, num_docs: int) -> int:
    """M for N rows: `shard_size`, or ceil(N / `AUTO_SHARDS`) within [`MIN_AUTO_SHARD_SIZE`,
    `DEFAULT_SHARD_SIZE`]."""
    if self.shard_size:
      return self.shard_size
    return min(DEFAULT_SHARD_SIZE, max(MIN_AUTO_SHARD_SIZE, -(-num_docs // AUTO_SHARDS)))

  def shard_ranges(self, num_docs: int) -> List[range]:
    """The row ranges of the S = ceil(N / M) shards of N rows, sizes within 1 of each other."""
    shard_size = self.shard_size_for(num_docs)
    num_shards = max(1, -(-num_docs // shard_size))
    bounds = [num_docs * s // num_shards for s in range(num_shards + 1)]
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


@dataclasses.dataclass(frozen=True)
class ScannSettings:
  """ScaNN build settings of each shard; 0 means the automatic rule (module docstring).

  Attributes:
    num_leaves: L, k-means tree leaves of each shard; 1: no tree (exact scoring); 0: sqrt(n)
      for a shard of n >= 10k rows.
    num_leaves_to_search: leaves probed per query, at most L; 0: ceil(L / 20).
    dimensions_per_block: dimensions per asymmetric-hashing block, at most D.
    reorder_k: candidates re-scored exactly per query (a search for more takes k).

  Raises:
    InputError: a negative value, a zero block size or reorder size, or more leaves to search
      than leaves.
  """
  num_leaves: int = 0
  num_leaves_to_search: int = 0
  dimensions_per_block: int = 2
  reorder_k: int = 100

  def __post_init__(self):
    _check_integers(self, {"num_leaves": 0, "num_leaves_to_search": 0,
                           "dimensions_per_block": 1, "reorder_k": 1})
    if self.num_leaves and self.num_leaves_to_search > self.num_leaves:
      raise errors.InputError(errors.describe(
          _setting(self, "num_leaves_to_search"), f"{self.num_leaves_to_search} leaves to "
          f"search, but {_setting(self, 'num_leaves')}={self.num_leaves}",
          "Search at most as many leaves as the tree has"))

  def check(self, num_docs: int, dim: int, sharding: Sharding) -> None:
    """Raises InputError (as `build_args`) unless the settings fit every shard of N rows that
    `sharding` makes."""
    for size in sorted({len(r) for r in sharding.shard_ranges(num_docs)}):
      self.build_args(size, dim)

  def build_args(self, num_docs: int, dim: int) -> Dict[str, Any]:
    """`ScannIndex.build` keyword arguments for N = `num_docs` embeddings of dimension D.

    Raises:
      InputError: more leaves than documents, more leaves to search than the (automatic)
        leaves, or hashing blocks wider than D.
    """
    leaves = self.num_leaves or (round(math.sqrt(num_docs))
                                 if num_docs >= MIN_DOCS_FOR_PARTITIONING else 1)
    if leaves > num_docs:
      raise errors.InputError(errors.describe(
          _setting(self, "num_leaves"), f"{leaves} leaves for {num_docs} documents",
          "Pass at most one leaf per document, or 0 for the sqrt(N) rule"))
    if leaves > 1 and self.num_leaves_to_search > leaves:
      raise errors.InputError(errors.describe(
          _setting(self, "num_leaves_to_search"), f"{self.num_leaves_to_search} leaves to "
          f"search, but the tree over {num_docs} documents has {leaves}",
          f"Pass fewer, or set {_setting(self, 'num_leaves')}"))
    if leaves > 1 and self.dimensions_per_block > dim:
      raise errors.InputError(errors.describe(
          _setting(self, "dimensions_per_block"), f"{self.dimensions_per_block} dimensions per "
          f"block, but the embeddings have {dim}", "Pass at most the embedding dimension"))
    return dict(num_neighbors=min(_DEFAULT_NUM_NEIGHBORS, self.reorder_k), num_leaves=leaves,
                num_leaves_to_search=self.num_leaves_to_search or None,
                dimensions_per_block=self.dimensions_per_block, reorder_k=self.reorder_k)


# The reference REALM's index over its 13,353,718 Wikipedia blocks.
FULL_WIKIPEDIA = ScannSettings(num_leaves=1000, num_leaves_to_search=100)


def _fix(name: str) -> str:
  if name in ("num_leaves", "num_leaves_to_search"):
    return "Pass 0 for the automatic rule (sqrt(N) leaves, 1/20 of them searched)"
  if name == "shard_size":
    return (f"Pass a positive number of rows, or 0 for N / {AUTO_SHARDS} within "
            f"[{MIN_AUTO_SHARD_SIZE:,}, {DEFAULT_SHARD_SIZE:,}]")
  return f"Pass a positive integer (default {getattr(ScannSettings, name)})"


def check_kind(kind: str) -> None:
  """Raises InputError unless `kind` is one of `KINDS`."""
  if kind not in KINDS:
    raise errors.InputError(errors.describe(
        "index_kind", f"{kind!r} is not an index kind", f"Pass one of {', '.join(KINDS)}"))


def _file_mapping(array: Any) -> Optional[mmap.mmap]:
  """The read-only or shared file mapping `array` is a view of, or None (copy-on-write
  mappings too: dropping their pages would drop the caller's changes)."""
  while array is not None and not isinstance(array, mmap.mmap):
    if isinstance(array, np.memmap) and array.mode == "c":
      return None
    array = getattr(array, "base", None)
  return array


def _shard_rows(embeddings: Any, rows: range) -> np.ndarray:
  """float32 [n, D] rows of any [N, D] array-like; a memory-mapped input's pages are then
  released from this process's resident memory."""
  mapping = _file_mapping(embeddings)
  if mapping is None:
    return np.ascontiguousarray(embeddings[rows.start:rows.stop], dtype=np.float32)
  shard = np.array(embeddings[rows.start:rows.stop], dtype=np.float32, order="C")  # a copy
  mapping.madvise(mmap.MADV_DONTNEED)
  return shard


def _build_one(embeddings: np.ndarray, kind: str, scann: ScannSettings) -> MipsIndex:
  if kind == "brute_force":
    return BruteForceIndex(embeddings)
  return ScannIndex.build(embeddings, **scann.build_args(*embeddings.shape))


def _checked_shape(embeddings: Any, kind: str):
  check_kind(kind)
  shape = np.shape(embeddings)
  if len(shape) != 2 or min(shape) < 1:
    raise ValueError(f"embeddings must be a non-empty [N, D] matrix, got {shape}")
  return shape


def _shard_plan(embeddings: Any, kind: str, scann: ScannSettings,
                sharding: Sharding) -> List[range]:
  """The shards' row ranges, after checking the embeddings' shape and the settings."""
  num_docs, dim = _checked_shape(embeddings, kind)
  if kind == "scann":
    scann.check(num_docs, dim, sharding)
  return sharding.shard_ranges(num_docs)


def build_index(embeddings: Any, kind: str, scann: ScannSettings = ScannSettings(),
                sharding: Sharding = Sharding()) -> MipsIndex:
  """A `ScannIndex` ("scann", built with `scann`) or `BruteForceIndex` ("brute_force") over
  [N, D] embeddings (float32, float16 or bfloat16, converted to float32), in memory; a
  `ShardedIndex` of such indexes when N exceeds the shard size of `sharding`.

  Raises:
    InputError: an unknown kind, or ScaNN settings that do not fit the shards and D.
    ValueError: embeddings are not a non-empty [N, D] matrix.
  """
  ranges = _shard_plan(embeddings, kind, scann, sharding)
  shards = [_build_one(_shard_rows(embeddings, rows), kind, scann) for rows in ranges]
  if len(shards) == 1:
    return shards[0]
  return ShardedIndex(shards, sharding.shard_size_for(np.shape(embeddings)[0]))


def save_index(embeddings: Any, directory: str, kind: str,
               scann: ScannSettings = ScannSettings(), sharding: Sharding = Sharding(),
               build_shards: Optional[Callable[[str, List[range], List[str]], None]] = None
               ) -> None:
  """Builds the index of `build_index` and saves it into `directory`, one shard at a time:
  each shard's rows are converted to float32, indexed, saved and freed before the next.

  Args:
    embeddings: [N, D] array-like (np.ndarray, a memmap; float32, float16 or bfloat16).
    directory: the index directory to write (created).
    kind: "scann" or "brute_force".
    scann: the ScaNN settings of each shard (kind "scann").
    sharding: the shard size (either kind).
    build_shards: with several shards, called as `build_shards(directory, ranges, names)` to
      build and save shard s of rows `ranges[s]` into `directory/names[s]` (e.g. on Beam
      workers) instead of doing so here, in turn; the top manifest is written after it.

  Raises:
    InputError: an unknown kind, or ScaNN settings that do not fit the shards and D.
    ValueError: embeddings are not a non-empty [N, D] matrix.
  """
  ranges = _shard_plan(embeddings, kind, scann, sharding)
  if len(ranges) == 1:
    _build_one(_shard_rows(embeddings, ranges[0]), kind, scann).save(directory)
    return
  names = [ShardedIndex.shard_directory(s, len(ranges)) for s in range(len(ranges))]
  tf.io.gfile.makedirs(directory)
  if build_shards is not None:
    build_shards(directory, ranges, names)
  else:
    for rows, name in zip(ranges, names):
      shard = _build_one(_shard_rows(embeddings, rows), kind, scann)
      shard.save(os.path.join(directory, name))
      del shard  # ScaNN's copy of the shard goes before the next shard's rows are read
  ShardedIndex.write_manifest(directory, names, sharding.shard_size_for(np.shape(embeddings)[0]))


def kind_of(index: MipsIndex) -> str:
  """The kind `build_index` was given for `index`: "scann" or "brute_force" (a sharded index's
  shards' kind)."""
  return index.shard_kind if isinstance(index, ShardedIndex) else index.KIND
