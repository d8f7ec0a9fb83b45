"""A MIPS index split into S shards over contiguous row ranges, searched as one.

Legend: Q queries, N documents, D embedding dimension, k results, S shards, n_s rows of shard s.

Shard s is a complete index (`ScannIndex` or `BruteForceIndex`) over rows [start_s, end_s).
`search` asks every shard for its top min(k, n_s), adds the shard's row offset and keeps the
global top k (TF ops, eager or traced); equal scores keep the lower shard first.

Saved as `shard-SSSSS-of-SSSSS/` sub-directories, each with its own manifest, under a top
`manifest.json` of kind "sharded" listing each shard's row range, count and the sha256 of its
manifest: every byte is checksummed from the top, and a shard of another index is refused.
Loading takes the factory's shard loader (`index_loading`), so this module imports no
implementation.
"""
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.mips import manifest as manifest_lib
from realm_tf.mips import mips_index

# Loads the (unsharded) index saved in a directory: (directory, verify_checksums) -> index.
ShardLoader = Callable[[str, bool], mips_index.MipsIndex]

_SHARDS = "shards"
_SHARD_KIND = "shard_kind"
_SHARD_SIZE = "shard_size"


def _shard_table(directory: str, manifest: manifest_lib.IndexManifest) -> List[Dict[str, Any]]:
  """The manifest's shard list, checked to tile [0, N) in order.

  Raises:
    IndexCorruptedError: the list is missing, ill-typed or not contiguous.
  """
  table = manifest.builder_param(directory, _SHARDS, (list,))
  bad = lambda why: manifest_lib.IndexCorruptedError(
      directory, manifest_lib.MANIFEST_NAME, f"shard list: {why}")
  if not table:
    raise bad("empty")
  start = 0
  for s, entry in enumerate(table):
    if not isinstance(entry, dict) or set(entry) != {"directory", "start", "end", "num_docs",
                                                    "manifest_sha256"}:
      raise bad(f"entry {s} is not {{directory, start, end, num_docs, manifest_sha256}}")
    name = entry["directory"]
    if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
      raise bad(f"entry {s} has an invalid directory {name!r}")
    counts = [entry[key] for key in ("start", "end", "num_docs")]
    if any(isinstance(c, bool) or not isinstance(c, int) for c in counts) or not (
        start == entry["start"] < entry["end"] == entry["start"] + entry["num_docs"]):
      raise bad(f"entry {s} ({name}) covers rows [{entry['start']}, {entry['end']}) with "
                f"num_docs={entry['num_docs']}; expected a non-empty range from row {start}")
    start = entry["end"]
  if start != manifest.num_docs:
    raise bad(f"the shards hold {start} rows, num_docs is {manifest.num_docs}")
  return table


def _load_shard(directory: str, entry: Mapping[str, Any], dim: int, verify_checksums: bool,
                load_shard: ShardLoader) -> mips_index.MipsIndex:
  """Loads one shard after checking it is the one the top manifest lists."""
  name = entry["directory"]
  shard_dir = os.path.join(directory, name)
  shard_manifest = os.path.join(name, manifest_lib.MANIFEST_NAME)
  if not tf.io.gfile.isdir(shard_dir):
    raise manifest_lib.IndexCorruptedError(
        directory, name, f"shard directory listed in {manifest_lib.MANIFEST_NAME} but missing")
  if not tf.io.gfile.exists(os.path.join(directory, shard_manifest)):
    raise manifest_lib.IndexCorruptedError(directory, shard_manifest, "missing")
  sha = manifest_lib.sha256_file(os.path.join(directory, shard_manifest))
  if sha != entry["manifest_sha256"]:
    raise manifest_lib.IndexCorruptedError(
        directory, shard_manifest, f"sha256 {sha} differs from {entry['manifest_sha256']} in "
        f"the top {manifest_lib.MANIFEST_NAME}: a shard of another index, or damaged")
  shard = load_shard(shard_dir, verify_checksums)
  if shard.num_docs != entry["num_docs"] or shard.dim != dim or isinstance(shard, ShardedIndex):
    raise manifest_lib.IndexCorruptedError(
        directory, shard_manifest, f"a {shard.KIND} index of {shard.num_docs} x {shard.dim}; "
        f"the top manifest expects a shard of {entry['num_docs']} x {dim}")
  return shard


class ShardedIndex(mips_index.MipsIndex):
  """S indexes over consecutive row ranges, searched and saved as one index.

  Example:
    index = ShardedIndex([ScannIndex.build(emb[:500_000]), ScannIndex.build(emb[500_000:])])
    scores, ids = index.search(query_emb, k=8)         # ids index the rows of emb
  """
  KIND = "sharded"

  def __init__(self, shards: Sequence[mips_index.MipsIndex], shard_size: Optional[int] = None):
    """Creates the index; shard s covers the n_s rows after those of shards 0..s-1.

    Args:
      shards: the S >= 1 shard indexes, all of one kind and dimension D, none sharded.
      shard_size: the most rows per shard the builder was given (recorded in the manifest).

    Raises:
      ValueError: no shards, a sharded shard, or shards of different kinds or dimensions.
    """
    shards = list(shards)
    if not shards or any(isinstance(s, ShardedIndex) for s in shards):
      raise ValueError("a ShardedIndex needs at least one shard, none of them sharded")
    if len({(s.KIND, s.dim) for s in shards}) != 1:
      raise ValueError(f"shards of different kinds or dimensions: "
                       f"{[(s.KIND, s.dim) for s in shards]}")
    self._shards = shards
    self._offsets = np.cumsum([0] + [s.num_docs for s in shards]).tolist()
    self._shard_size = shard_size

  @property
  def num_docs(self) -> int:
    return int(self._offsets[-1])

  @property
  def dim(self) -> int:
    return self._shards[0].dim

  @property
  def shards(self) -> List[mips_index.MipsIndex]:
    """The S shard indexes, in row order."""
    return list(self._shards)

  @property
  def row_ranges(self) -> List[Tuple[int, int]]:
    """[(start_s, end_s)] of each shard."""
    return list(zip(self._offsets[:-1], self._offsets[1:]))

  @property
  def shard_kind(self) -> str:
    """The KIND of every shard ("scann" or "brute_force")."""
    return self._shards[0].KIND

  @property
  def shard_size(self) -> Optional[int]:
    """The most rows per shard the builder was given (None: not built by a builder)."""
    return self._shard_size

  def _search(self, queries: tf.Tensor, k: int) -> Tuple[tf.Tensor, tf.Tensor]:
    all_scores, all_ids = [], []
    for shard, start in zip(self._shards, self._offsets):
      scores, ids = shard.search(queries, min(k, shard.num_docs))  # [Q, min(k, n_s)]
      all_scores.append(scores)
      all_ids.append(tf.where(ids >= 0, ids + start, ids))  # -1: not found
    # Shard order, each best first: top_k keeps the earlier of equal scores first.
    scores, positions = tf.math.top_k(tf.concat(all_scores, axis=1), k=k)  # [Q, k]
    ids = tf.gather(tf.concat(all_ids, axis=1), positions, batch_dims=1)
    return scores, ids

  def document_embeddings(self) -> np.ndarray:
    return np.concatenate([s.document_embeddings() for s in self._shards])

  @staticmethod
  def shard_directory(shard: int, num_shards: int) -> str:
    """The sub-directory name of shard `shard` of `num_shards`."""
    return f"shard-{shard:05d}-of-{num_shards:05d}"

  def save(self, directory: str) -> None:
    tf.io.gfile.makedirs(directory)
    names = [self.shard_directory(s, len(self._shards)) for s in range(len(self._shards))]
    for shard, name in zip(self._shards, names):
      shard.save(os.path.join(directory, name))
    self.write_manifest(directory, names, self._shard_size)

  @classmethod
  def write_manifest(cls, directory: str, shard_directories: Sequence[str],
                     shard_size: Optional[int] = None) -> manifest_lib.IndexManifest:
    """Writes the top `manifest.json` over shards already saved in `directory`, in row order;
    reads only their manifests. Returns it.

    Raises:
      IndexCorruptedError: a shard's manifest is missing or invalid.
      ValueError: no shards, or shards of different kinds or dimensions (or sharded).
    """
    if not shard_directories:
      raise ValueError(f"no shards to list in {directory}")
    table, start, kinds = [], 0, set()
    for name in shard_directories:
      shard = manifest_lib.IndexManifest.read(os.path.join(directory, name))
      kinds.add((shard.kind, shard.dim))
      table.append({"directory": name, "start": start, "end": start + shard.num_docs,
                    "num_docs": shard.num_docs, "manifest_sha256": manifest_lib.sha256_file(
                        os.path.join(directory, name, manifest_lib.MANIFEST_NAME))})
      start += shard.num_docs
    if len(kinds) != 1 or cls.KIND in dict(kinds):
      raise ValueError(f"shards of different kinds or dimensions {sorted(kinds)} in {directory}")
    kind, dim = kinds.pop()
    manifest = manifest_lib.IndexManifest.for_files(
        directory, [], kind=cls.KIND, num_docs=start, dim=dim,
        builder={_SHARD_SIZE: shard_size, _SHARD_KIND: kind, _SHARDS: table})
    manifest.write(directory)
    return manifest

  @classmethod
  def check_shards(cls, directory: str, manifest: manifest_lib.IndexManifest,
                   check: Callable[[mips_index.MipsIndex, str], None], *,
                   load_shard: ShardLoader) -> None:
    """Loads each shard in turn with `load_shard` (checksums verified), calls
    `check(shard, shard_directory)` and drops it before the next: at most one shard is held.

    Raises:
      IndexCorruptedError: a shard is missing, damaged, or not the one listed.
    """
    for entry in _shard_table(directory, manifest):
      shard = _load_shard(directory, entry, manifest.dim, True, load_shard)
      check(shard, os.path.join(directory, entry["directory"]))
      del shard

  @classmethod
  def from_directory(cls, directory: str, manifest: manifest_lib.IndexManifest,
                     verify_checksums: bool = True, *,
                     load_shard: ShardLoader) -> "ShardedIndex":
    """See `MipsIndex.from_directory`; each shard is loaded by `load_shard`, and
    `verify_checksums` applies to the shards' files."""
    shards = [_load_shard(directory, entry, manifest.dim, verify_checksums, load_shard)
              for entry in _shard_table(directory, manifest)]
    return cls(shards, manifest.builder_param(directory, _SHARD_SIZE, (int, type(None))))
