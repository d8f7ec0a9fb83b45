"""Versioned MIPS index directories, published atomically for the asynchronous refresh.

    <index_root>/step-00001200/            a complete, verified index (manifest + files)
    <index_root>/step-00003600.tmp-<uuid>/ being written (or left by a killed builder)
    <index_root>/LATEST                    "step-00002400\\n": the published version

`publish` writes into `<version>.tmp-<uuid>/`, verifies it (`check_index`, shard by shard),
renames it to `<version>/` and only then replaces `LATEST` by an atomic rename, so a reader
going through `LATEST` (`load_latest`) never sees a half-written index. `LATEST` must name a
version directory inside the root (`InputError` naming the file and the fix otherwise).
Metadata (`METADATA_KEYS`) is merged into the checksummed manifest's `builder` parameters.
This is the one on-disk index format: the pre-training refresher, the index builder and a QA
model's document index (`realm_tf.qa.doc_index`) all write and read it.
"""
import dataclasses
import os
import re
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.mips import index_loading
from realm_tf.mips import manifest as manifest_lib
from realm_tf.mips import mips_index

LATEST = "LATEST"
METADATA_KEYS = "metadata_keys"
_OLD_DOC_INDEX_INFO = "info.json"
_TMP_MARKER = ".tmp-"
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_STEP_VERSION = re.compile(r"^step-(\d+)$")


class PublishError(RuntimeError):
  """The index written for publication failed verification; nothing was published."""


def version_for_step(step: int) -> str:
  """The version name of an index built from the trainer's snapshot at `step` (>= 0)."""
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  return f"step-{step:08d}"


def step_of_version(version: str) -> Optional[int]:
  """The snapshot step of a `version_for_step` name, or None for any other version name."""
  match = _STEP_VERSION.match(version)
  return int(match.group(1)) if match else None


def _is_version(name: str) -> bool:
  """Whether `name` can be a version directory: one path component inside the root."""
  return bool(_VERSION.match(name)) and _TMP_MARKER not in name and name != LATEST


def check_version(version: str, flag: str = "") -> None:
  """Raises InputError (a ValueError, naming `flag`) unless `version` names a directory."""
  if not _is_version(version):
    raise errors.InputError(errors.describe(
        f"{flag}={version!r}" if flag else repr(version),
        "invalid index version: not the name of one directory in the index root",
        f"Use letters, digits, '_', '.', '-' (e.g. {version_for_step(1200)!r}), without "
        f"{_TMP_MARKER!r}"))


def _sanity_check(index: mips_index.MipsIndex, directory: str) -> None:
  """Searches the reloaded index with a few of its own rows; raises PublishError if the
  results are malformed."""
  k = min(4, index.num_docs)
  queries = np.random.default_rng(0).standard_normal([2, index.dim]).astype(np.float32)
  scores, ids = index.search(queries, k=k)
  scores, ids = scores.numpy(), ids.numpy()
  found = ids >= 0
  if scores.shape != (2, k) or ids.shape != (2, k) or not found[:, 0].all():
    raise PublishError(f"index in {directory} failed its search check: ids {ids.tolist()}")
  if (ids[found] >= index.num_docs).any() or not np.isfinite(scores[found]).all():
    raise PublishError(f"index in {directory} returned invalid results: ids {ids.tolist()}, "
                       f"scores {scores.tolist()}")


def _write_metadata(directory: str, metadata: Mapping[str, Any]) -> None:
  """Merges `metadata` into the manifest's builder parameters (rewrites manifest.json; the
  checksums cover the data files, which do not change)."""
  manifest = manifest_lib.IndexManifest.read(directory)
  clash = sorted(set(metadata) & (set(manifest.builder) | {METADATA_KEYS}))
  if clash:
    raise ValueError(f"metadata keys {clash} clash with the index's build parameters")
  builder = {**manifest.builder, **metadata}
  builder[METADATA_KEYS] = sorted(metadata)
  dataclasses.replace(manifest, builder=builder).write(directory)


def metadata_of(manifest: manifest_lib.IndexManifest) -> Dict[str, Any]:
  """The metadata `write_index` (or `publish`) merged into `manifest`."""
  keys = manifest.builder.get(METADATA_KEYS, [])
  return {key: manifest.builder[key] for key in keys if key in manifest.builder}


def write_index(index: Union[mips_index.MipsIndex, Callable[[str], None]], directory: str,
                metadata: Optional[Mapping[str, Any]] = None) -> None:
  """Saves `index` (or calls `index(directory)`, e.g. `index_builder.save_index`) into
  `directory` with `metadata` (JSON values) merged into its manifest.

  Raises:
    ValueError: metadata keys clash with the index's build parameters.
  """
  index.save(directory) if isinstance(index, mips_index.MipsIndex) else index(directory)
  _write_metadata(directory, dict(metadata or {}))


def is_index(directory: str) -> bool:
  """Whether `directory` holds a complete index (its manifest)."""
  return tf.io.gfile.exists(os.path.join(directory, manifest_lib.MANIFEST_NAME))


def is_old_doc_index(directory: str) -> bool:
  """Whether `directory` holds a document index in the older layout (no manifest)."""
  return not is_index(directory) and tf.io.gfile.exists(
      os.path.join(directory, _OLD_DOC_INDEX_INFO))


def read_manifest(directory: str) -> manifest_lib.IndexManifest:
  """The manifest of the index in `directory`.

  Raises:
    InputError: `directory` holds a document index in the older layout (rebuild it).
    IndexCorruptedError: the manifest is missing or invalid.
  """
  if is_old_doc_index(directory):
    raise errors.InputError(errors.describe(
        directory, f"a document index in the older layout ({_OLD_DOC_INDEX_INFO}, "
        "embeddings.npy, index/), which this version no longer reads; indexes are now version "
        f"directories with a {manifest_lib.MANIFEST_NAME} (format_version "
        f"{manifest_lib.FORMAT_VERSION}) and sha256 checksums",
        "Rebuild it: re-run fine-tuning on the model directory's checkpoint with "
        "--num_train_steps=0 (a fine-tuned model), or python -m pipelines.build_index"))
  return manifest_lib.IndexManifest.read(directory)


def read_index(directory: str, verify_checksums: bool = True
               ) -> Tuple[mips_index.MipsIndex, Dict[str, Any]]:
  """The index in `directory` (written by `write_index` or `publish`) and its metadata.

  Raises:
    InputError: a document index in the older layout (`read_manifest`).
    IndexCorruptedError: the index does not verify.
  """
  manifest = read_manifest(directory)
  return index_loading.load_index(directory, verify_checksums), metadata_of(manifest)


def _write_atomically(path: str, content: str) -> None:
  tmp = f"{path}{_TMP_MARKER}{uuid.uuid4().hex}"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(content)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def publish(index: Union[mips_index.MipsIndex, Callable[[str], None]], index_root: str,
            version: str, metadata: Optional[Mapping[str, Any]] = None) -> str:
  """Saves, verifies and atomically publishes `index` as `<index_root>/<version>/`.

  Args:
    index: the built index, or a function that writes one into a directory (`write_index`).
    index_root: the directory holding the versions and `LATEST`.
    version: the new version's name (`version_for_step(snapshot_step)`); it becomes `LATEST`.
    metadata: JSON values merged into the manifest's builder parameters (e.g.
      `corpus_fingerprint`, `snapshot_step`); keys must not clash with the index's own.

  Returns:
    the published directory `<index_root>/<version>`.

  Raises:
    ValueError: the version name is invalid, or metadata keys clash with build parameters.
    FileExistsError: the version directory exists already.
    PublishError: the written index did not verify (the temporary directory is removed).
  """
  check_version(version)
  final = os.path.join(index_root, version)
  if tf.io.gfile.exists(final):
    raise FileExistsError(f"index version directory {final} exists already")
  tf.io.gfile.makedirs(index_root)
  tmp = f"{final}{_TMP_MARKER}{uuid.uuid4().hex}"
  try:
    write_index(index, tmp, metadata)
    try:
      index_loading.check_index(tmp, _sanity_check)
    except manifest_lib.IndexCorruptedError as e:
      raise PublishError(f"index written to {tmp} does not verify: {e}") from e
    tf.io.gfile.rename(tmp, final)
  except BaseException:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.rmtree(tmp)
    raise
  _write_atomically(os.path.join(index_root, LATEST), version + "\n")
  return final


def _repoint_advice(index_root: str, before: Optional[str] = None) -> str:
  """How to make `LATEST` name a complete version (older than `before`, if given) again."""
  path = os.path.join(index_root, LATEST)
  versions = list_versions(index_root)
  earlier = [v for v in versions if before is None or v < before]
  if earlier:
    advice = (f"write '{earlier[-1]}' into {path} to publish the newest complete "
              f"{'earlier ' if before else ''}version")
    if earlier[-1] == versions[-1]:
      advice += f" (index_publisher.repoint_latest({index_root!r}) does that)"
    return advice
  if versions:
    return (f"no complete version precedes it: index_publisher.repoint_latest({index_root!r}) "
            f"publishes the newest, {versions[-1]!r}")
  return f"no complete version is left in {index_root}: delete {path} and build an index"


def _read_latest(index_root: str) -> Optional[str]:
  """The version `LATEST` names (None if there is none), checked to be a name inside the root;
  the directory may be missing."""
  path = os.path.join(index_root, LATEST)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "r") as f:
    content = f.read()
  version = content.strip()
  if version and not _is_version(version):
    raise errors.InputError(
        f"{path} holds {content[:200]!r}, not the name of a version directory in "
        f"{index_root} (one path component such as {version_for_step(1200)!r}: "
        f"no path separators, no '..', not absolute); {_repoint_advice(index_root)}")
  return version or None


def latest_version(index_root: str) -> Optional[str]:
  """The published version (named by `LATEST`), or None if nothing is published.

  Raises:
    ValueError: `LATEST` does not name a version directory inside `index_root`.
    FileNotFoundError: the version `LATEST` names does not exist.
  """
  version = _read_latest(index_root)
  if version is not None and not tf.io.gfile.isdir(os.path.join(index_root, version)):
    path = os.path.join(index_root, LATEST)
    raise FileNotFoundError(f"{path} names version {version!r}, which does not exist (no "
                            f"directory {os.path.join(index_root, version)}); "
                            f"{_repoint_advice(index_root, before=version)}")
  return version


def repoint_latest(index_root: str) -> Optional[str]:
  """Points `LATEST` at the newest complete version (removes it if none is left).

  Returns:
    the version now published, or None.
  """
  versions = list_versions(index_root)
  path = os.path.join(index_root, LATEST)
  if versions:
    _write_atomically(path, versions[-1] + "\n")
    return versions[-1]
  if tf.io.gfile.exists(path):
    tf.io.gfile.remove(path)
  return None


def load_latest(index_root: str) -> Tuple[str, mips_index.MipsIndex, Dict[str, Any]]:
  """Loads the published index.

  Returns:
    (version, index, metadata): metadata is what `publish` was given (e.g.
    `corpus_fingerprint`, `snapshot_step`).

  Raises:
    FileNotFoundError: nothing is published under `index_root`, or `LATEST` names a version
      that does not exist.
    ValueError: `LATEST` does not name a version directory inside `index_root`.
    IndexCorruptedError: the published index does not verify.
  """
  version = latest_version(index_root)
  if version is None:
    raise FileNotFoundError(f"no index has been published in {index_root} (no {LATEST} file)")
  index, metadata = read_index(os.path.join(index_root, version))
  return version, index, metadata


def load_version(index_root: str, version: str,
                 verify_checksums: bool = True) -> mips_index.MipsIndex:
  """Loads version `version` of `index_root`, published or not; `verify_checksums`: see
  `index_loading.load_index` (`publish` verified every published version once already)."""
  check_version(version)
  return read_index(os.path.join(index_root, version), verify_checksums)[0]


def read_metadata(index_root: str, version: str) -> Dict[str, Any]:
  """The metadata `publish` stored with version `version`."""
  check_version(version)
  return metadata_of(read_manifest(os.path.join(index_root, version)))


def list_versions(index_root: str) -> List[str]:
  """Complete version directories (with a manifest), oldest first; temporary ones excluded."""
  if not tf.io.gfile.isdir(index_root):
    return []
  versions = []
  for name in (name.rstrip("/") for name in tf.io.gfile.listdir(index_root)):
    if _is_version(name) and is_index(os.path.join(index_root, name)):
      versions.append(name)
  return sorted(versions)


def cleanup_partial(index_root: str, older_than_s: float = 0.0) -> List[str]:
  """Removes what killed builders left: `*.tmp-*` directories and files.

  Call it when no builder is writing under `index_root` (e.g. when the trainer starts), or
  pass `older_than_s` larger than a build takes to spare builds in progress.

  Returns:
    the removed names.
  """
  if not tf.io.gfile.isdir(index_root):
    return []
  removed = []
  now = time.time()
  for name in tf.io.gfile.listdir(index_root):
    name = name.rstrip("/")
    if _TMP_MARKER not in name:
      continue
    path = os.path.join(index_root, name)
    if older_than_s > 0:
      try:
        age = now - tf.io.gfile.stat(path).mtime_nsec / 1e9
      except tf.errors.NotFoundError:
        continue
      if age < older_than_s:
        continue
    if tf.io.gfile.isdir(path):
      tf.io.gfile.rmtree(path)
    else:
      tf.io.gfile.remove(path)
    removed.append(name)
  return sorted(removed)


def discard_after(index_root: str, step: int) -> List[str]:
  """Deletes the versions built from snapshots after `step`, and re-points `LATEST`.

  A trainer killed after publishing the index of step S but before checkpointing S resumes
  from an earlier checkpoint: the versions after its resumed step come from weights it no
  longer has, and it will build them again. Call this when it starts, before any builder runs.

  Returns:
    the deleted versions.
  """
  published = _read_latest(index_root)  # an invalid LATEST fails before anything is deleted
  doomed = [v for v in list_versions(index_root) if (step_of_version(v) or 0) > step]
  for version in doomed:
    tf.io.gfile.rmtree(os.path.join(index_root, version))
  if published in doomed:
    repoint_latest(index_root)
  return doomed


def keep_last(index_root: str, n: int, also: Iterable[str] = ()) -> List[str]:
  """Deletes all but the `n` newest complete versions; the published one and the versions
  `also` names (e.g. those kept checkpoints use) are always kept.

  Returns:
    the deleted versions.
  """
  if n < 1:
    raise ValueError(f"n must be >= 1, got {n}")
  published = _read_latest(index_root)
  versions = list_versions(index_root)
  spared = set(also) | {published}
  doomed = [v for v in versions[:-n] if v not in spared]
  for version in doomed:
    tf.io.gfile.rmtree(os.path.join(index_root, version))
  return doomed
