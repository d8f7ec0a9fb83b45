"""What every index builder builds: an exact index, or ScaNN with the user's settings.

Legend: N documents, D embedding dimension, L tree leaves.

`ScannSettings` are the four ScaNN knobs every index-building binary exposes as flags
(`realm_tf.cli.define_scann_flags`: `--scann_num_leaves`, `--scann_num_leaves_to_search`,
`--scann_dimensions_per_block`, `--scann_reorder_k`). The defaults are the automatic rule of
`ScannIndex.build`: L = round(sqrt(N)) leaves from N >= 10,000 documents (exact brute force
below), ceil(L / 20) of them searched, 2 dimensions per asymmetric-hashing block, 100
candidates re-scored exactly. `FULL_WIKIPEDIA` is the reference REALM's setting for its 13.3M
blocks: 1000 leaves, 100 searched. The resolved values are recorded in the index manifest
(`manifest.json`, "builder").
"""
import dataclasses
import math
from typing import Any, Dict, List

import numpy as np

from realm_tf import errors
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.mips.scann_index import MIN_DOCS_FOR_PARTITIONING
from realm_tf.mips.scann_index import ScannIndex

KINDS = ("scann", "brute_force")
_DEFAULT_NUM_NEIGHBORS = 8


@dataclasses.dataclass(frozen=True)
class ScannSettings:
  """ScaNN build settings; 0 means the automatic rule (see the module docstring).

  Attributes:
    num_leaves: L, k-means tree leaves; 1: no tree (exact scoring); 0: sqrt(N) from N >= 10k.
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
    for name, least in (("num_leaves", 0), ("num_leaves_to_search", 0),
                        ("dimensions_per_block", 1), ("reorder_k", 1)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise errors.InputError(errors.describe(
            f"--scann_{name}", f"{value!r} is not an integer >= {least}",
            _fix(name)))
    if self.num_leaves and self.num_leaves_to_search > self.num_leaves:
      raise errors.InputError(errors.describe(
          "--scann_num_leaves_to_search", f"{self.num_leaves_to_search} leaves to search, but "
          f"--scann_num_leaves={self.num_leaves}", "Search at most as many leaves as the tree has"))

  def flag_args(self) -> List[str]:
    """These settings as the flags of an index-builder binary."""
    return [f"--scann_{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)]

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
          "--scann_num_leaves", f"{leaves} leaves for {num_docs} documents",
          "Pass at most one leaf per document, or 0 for the sqrt(N) rule"))
    if leaves > 1 and self.num_leaves_to_search > leaves:
      raise errors.InputError(errors.describe(
          "--scann_num_leaves_to_search", f"{self.num_leaves_to_search} leaves to search, but "
          f"the tree over {num_docs} documents has {leaves}",
          "Pass fewer, or set --scann_num_leaves"))
    if leaves > 1 and self.dimensions_per_block > dim:
      raise errors.InputError(errors.describe(
          "--scann_dimensions_per_block", f"{self.dimensions_per_block} dimensions per block, "
          f"but the embeddings have {dim}", "Pass at most the embedding dimension"))
    return dict(num_neighbors=min(_DEFAULT_NUM_NEIGHBORS, self.reorder_k), num_leaves=leaves,
                num_leaves_to_search=self.num_leaves_to_search or None,
                dimensions_per_block=self.dimensions_per_block, reorder_k=self.reorder_k)


# The reference REALM's index over its 13,353,718 Wikipedia blocks.
FULL_WIKIPEDIA = ScannSettings(num_leaves=1000, num_leaves_to_search=100)


def _fix(name: str) -> str:
  if name in ("num_leaves", "num_leaves_to_search"):
    return "Pass 0 for the automatic rule (sqrt(N) leaves, 1/20 of them searched)"
  return f"Pass a positive integer (default {getattr(ScannSettings, name)})"


def check_kind(kind: str) -> None:
  """Raises InputError unless `kind` is one of `KINDS`."""
  if kind not in KINDS:
    raise errors.InputError(errors.describe(
        "--index_kind", f"{kind!r} is not an index kind", f"Pass one of {', '.join(KINDS)}"))


def build_index(embeddings: np.ndarray, kind: str,
                scann: ScannSettings = ScannSettings()) -> MipsIndex:
  """A `ScannIndex` ("scann", built with `scann`) or `BruteForceIndex` ("brute_force") over
  float32 [N, D] embeddings.

  Raises:
    InputError: an unknown kind, or ScaNN settings that do not fit N and D.
  """
  check_kind(kind)
  if kind == "brute_force":
    return BruteForceIndex(embeddings)
  shape = np.shape(embeddings)
  if len(shape) != 2 or min(shape) < 1:
    return ScannIndex.build(embeddings)  # raises its ValueError for a malformed matrix
  return ScannIndex.build(embeddings, **scann.build_args(*shape))
