"""Versioned, atomically published MIPS indexes under one root directory.

    <index_root>/step-00001200/           a complete, verified index (+ metadata.json)
    <index_root>/step-00001200.tmp-<uuid>  a build in progress (never read)
    <index_root>/LATEST                    the newest published version's name

`publish` saves into a temporary sibling, reloads and verifies it (manifest checksums and a
search), renames it to its version and only then rewrites `LATEST` (write a temporary file,
then rename over). A builder killed at any moment therefore leaves either nothing new or a
`.tmp-` directory that readers ignore and `cleanup_partial` removes. Version names sort in
publication order (zero-padded steps).
"""
import json
import os
import uuid
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.mips.mips_index import MipsIndex
from realm_tf.mips.mips_index import load_index

LATEST = "LATEST"
METADATA = "metadata.json"
_TMP = ".tmp-"


def _is_version(name: str) -> bool:
  return _TMP not in name and name not in (LATEST,) and not name.startswith(".")


def list_versions(index_root: str) -> List[str]:
  """Published versions, oldest first."""
  if not tf.io.gfile.isdir(index_root):
    return []
  return sorted(n.rstrip("/") for n in tf.io.gfile.listdir(index_root)
                if _is_version(n.rstrip("/")) and
                tf.io.gfile.isdir(os.path.join(index_root, n.rstrip("/"))))


def latest_version(index_root: str) -> Optional[str]:
  """The version `LATEST` names, or None before the first publication."""
  path = os.path.join(index_root, LATEST)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    version = f.read().strip()
  return version or None


def load_version(index_root: str, version: str) -> MipsIndex:
  """Loads one published version (checksums verified by `load_index`)."""
  return load_index(os.path.join(index_root, version))


def load_metadata(index_root: str, version: str) -> Dict:
  path = os.path.join(index_root, version, METADATA)
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def load_latest(index_root: str) -> Tuple[str, MipsIndex, Dict]:
  """(version, index, metadata) of the newest publication.

  Raises:
    FileNotFoundError: nothing has been published under `index_root`.
  """
  version = latest_version(index_root)
  if version is None:
    raise FileNotFoundError(f"no index has been published under {index_root}")
  return version, load_version(index_root, version), load_metadata(index_root, version)


def publish(index: MipsIndex, index_root: str, version: str, metadata: Optional[Dict] = None
            ) -> str:
  """Saves, verifies and atomically publishes `index` as `version`; returns its directory.

  Raises:
    ValueError: `version` is not a plain name, or the saved copy does not search like `index`.
  """
  if not _is_version(version) or "/" in version:
    raise ValueError(f"invalid index version name {version!r}")
  tf.io.gfile.makedirs(index_root)
  final = os.path.join(index_root, version)
  tmp = os.path.join(index_root, f"{version}{_TMP}{uuid.uuid4().hex}")
  index.save(tmp)
  with tf.io.gfile.GFile(os.path.join(tmp, METADATA), "w") as f:
    json.dump(dict(metadata or {}), f, indent=1, sort_keys=True)
  reloaded = load_index(tmp)
  probe = np.random.default_rng(0).standard_normal((2, index.dim)).astype(np.float32)
  k = min(4, index.num_docs)
  if not np.array_equal(reloaded.search(probe, k)[1], index.search(probe, k)[1]):
    raise ValueError(f"the saved index in {tmp} does not search like the built one")
  if tf.io.gfile.exists(final):
    tf.io.gfile.rmtree(final)
  tf.io.gfile.rename(tmp, final)
  pointer = os.path.join(index_root, f"{LATEST}{_TMP}{uuid.uuid4().hex}")
  with tf.io.gfile.GFile(pointer, "w") as f:
    f.write(version + "\n")
  tf.io.gfile.rename(pointer, os.path.join(index_root, LATEST), overwrite=True)
  return final


def cleanup_partial(index_root: str) -> List[str]:
  """Removes the leftovers of killed builds; returns their names."""
  if not tf.io.gfile.isdir(index_root):
    return []
  removed = []
  for name in tf.io.gfile.listdir(index_root):
    name = name.rstrip("/")
    if _TMP in name:
      path = os.path.join(index_root, name)
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
      removed.append(name)
  return removed


def keep_last(index_root: str, n: int) -> List[str]:
  """Deletes all but the newest `n` published versions (never the one `LATEST` names)."""
  latest = latest_version(index_root)
  versions = list_versions(index_root)
  doomed = [v for v in versions[:-n] if v != latest] if n > 0 else []
  for version in doomed:
    tf.io.gfile.rmtree(os.path.join(index_root, version))
  return doomed
