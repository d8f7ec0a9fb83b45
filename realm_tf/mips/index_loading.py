"""`load_index` and `check_index`: any saved MIPS index, by the kind its manifest names.

The factory over the implementations (`BruteForceIndex`, `ScannIndex`, `ShardedIndex`), kept
out of `mips_index` so that the interface imports none of them. A `ShardedIndex` is given
`load_index` to load its shards with.
"""
from typing import Callable

from realm_tf.mips import manifest as manifest_lib
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.mips.sharded_index import ShardedIndex

_IMPLEMENTATIONS = {cls.KIND: cls for cls in (BruteForceIndex, ScannIndex)}


def load_index(directory: str, verify_checksums: bool = True) -> MipsIndex:
  """Loads the index saved in `directory` by any `MipsIndex.save`.

  Reads `manifest.json`, recomputes every file's sha256 (unless `verify_checksums` is False:
  for an index its publisher verified already), and dispatches on the manifest's kind to the
  implementation, which checks the stored shapes against num_docs and dim.

  Args:
    directory: a directory written by `save` (local path or any `tf.io.gfile` URL).
    verify_checksums: recompute the files' sha256 (the whole index is read once more).

  Returns:
    The index, a `BruteForceIndex`, a `ScannIndex` or a `ShardedIndex` of either (whose
    shards' checksums `verify_checksums` covers too).

  Raises:
    IndexCorruptedError: the manifest is missing or invalid, a file is missing or fails its
      checksum, or the stored arrays disagree with the manifest.
  """
  manifest = manifest_lib.IndexManifest.read(directory)
  manifest.verify(directory, checksums=verify_checksums)
  if manifest.kind == ShardedIndex.KIND:  # its shards are indexes of their own
    return ShardedIndex.from_directory(directory, manifest, verify_checksums,
                                       load_shard=load_index)
  return _IMPLEMENTATIONS[manifest.kind].from_directory(directory, manifest)


def check_index(directory: str, check: Callable[[MipsIndex, str], None]) -> None:
  """Loads the index in `directory` (checksums verified) and calls `check(index, directory)`;
  a `ShardedIndex` shard by shard, each dropped before the next is loaded, so that verifying
  an index written shard by shard never needs all of it in memory.

  Raises:
    IndexCorruptedError: as `load_index`.
  """
  manifest = manifest_lib.IndexManifest.read(directory)
  if manifest.kind == ShardedIndex.KIND:
    ShardedIndex.check_shards(directory, manifest, check, load_shard=load_index)
  else:
    check(load_index(directory), directory)
