"""The document indexes of an imported released model: one per index setting, over one shared
embeddings file per storage dtype.

Layout inside an import directory (`qa.released_imports`):

    embeddings/<dtype>/block_embeddings.npy   the released `block_emb`, verified, in <dtype>
    index/<name>/                             a `DocIndex` directory per setting

`<name>` spells out every setting that shapes the index (`index_name`), e.g.
`scann-leaves_auto-search_auto-dims_2-reorder_100-shard_auto-float32` or
`brute_force-shard_auto-float32` (an exact index has no ScaNN settings). An index's
`block_embeddings.npy` is a hard link of the shared file (a copy where the file system has
none), so a second setting costs its index, not another 6.8 GB of embeddings.
"""
import os
import shutil
import uuid
from typing import Tuple

import numpy as np

from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.retrieval import embedding_file

EMBEDDINGS = "embeddings"
INDEX = "index"


def index_name(kind: str, scann: ScannSettings, sharding: Sharding, storage_dtype: str) -> str:
  """The directory name of the index of these settings (0 settings spelled "auto")."""
  index_builder.check_kind(kind)
  spell = lambda value: str(value) if value else "auto"
  parts = [kind]
  if kind == "scann":
    parts += [f"leaves_{spell(scann.num_leaves)}", f"search_{spell(scann.num_leaves_to_search)}",
              f"dims_{scann.dimensions_per_block}", f"reorder_{scann.reorder_k}"]
  parts += [f"shard_{spell(sharding.shard_size)}",
            embedding_file.check_storage_dtype(storage_dtype)]
  return "-".join(parts)


def embeddings_path(import_dir: str, storage_dtype: str) -> str:
  return os.path.join(import_dir, EMBEDDINGS, storage_dtype, embedding_file.EMBEDDING_FILE)


def write_embeddings(import_dir: str, source: np.ndarray, storage_dtype: str) -> str:
  """Copies `source` [N, D] (the verified `block_emb`) into the shared embeddings file of
  `storage_dtype`, a chunk of rows at a time (written aside, then renamed); returns its path."""
  path = embeddings_path(import_dir, storage_dtype)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  work = f"{path}.tmp-{uuid.uuid4().hex[:8]}.npy"
  out = embedding_file.copy_rows(source, work, storage_dtype)
  del out
  os.replace(work, path)
  return path


def _link(source: str, target: str) -> None:
  try:
    os.link(source, target)
  except OSError:  # no hard links here (another device, a file system without them)
    shutil.copyfile(source, target)


def add_index(import_dir: str, corpus_fingerprint: str, kind: str, scann: ScannSettings,
              sharding: Sharding, storage_dtype: str) -> Tuple[str, bool]:
  """(the index directory of these settings, relative to `import_dir`; whether it was built
  now). An index there already is reused; a new one is built beside it and renamed into place,
  so a killed build leaves no index.

  Raises:
    FileNotFoundError: no shared embeddings file of `storage_dtype` (`write_embeddings`).
    InputError: ScaNN settings that do not fit the embeddings (`index_builder`).
  """
  relative = os.path.join(INDEX, index_name(kind, scann, sharding, storage_dtype))
  target = os.path.join(import_dir, relative)
  if index_publisher.is_index(target):
    return relative, False
  shared = embeddings_path(import_dir, storage_dtype)
  if not os.path.exists(shared):
    raise FileNotFoundError(f"{shared}: no embeddings in {storage_dtype} in the import")
  work = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
  os.makedirs(work)
  try:
    path = os.path.join(work, embedding_file.EMBEDDING_FILE)
    _link(shared, path)
    embeddings = embedding_file.open_embeddings(path, storage_dtype)
    metadata = {"corpus_fingerprint": corpus_fingerprint, "snapshot_step": 0,
                "embedding_dtype": "float32", **embedding_file.metadata(path, storage_dtype)}
    index_publisher.write_index(
        lambda d: index_builder.save_index(embeddings, d, kind, scann, sharding), work, metadata)
    del embeddings
    if index_publisher.is_index(target):  # another run built it meanwhile
      shutil.rmtree(work)
    else:
      shutil.rmtree(target, ignore_errors=True)  # an incomplete one
      os.rename(work, target)
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise
  return relative, True
