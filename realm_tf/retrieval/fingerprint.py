"""The one corpus fingerprint: which blocks, in which order, with which titles and texts.

Row r of a corpus is row r of every block-embedding matrix and MIPS index built from it, so
every index, document index, run configuration and export records the fingerprint of the
corpus it was built from, and is checked against it when loaded. Legend: N blocks.

Definition: sha256 over the blocks in canonical (ascending block id) order, each block
contributing its id (8 bytes, int64 little-endian) and the sha256 of its title and text
(each as UTF-8, preceded by its byte length, 8 bytes little-endian). Per-block digests let a
corpus too large to hold in memory be fingerprinted while its shards are streamed in any
order (`pipelines.block_records.corpus_ids_and_fingerprint`): 40 bytes a block.
"""
import hashlib
from typing import Sequence

import numpy as np


def block_digest(title: str, text: str) -> bytes:
  """sha256 (32 bytes) of one block's length-prefixed UTF-8 title and text."""
  digest = hashlib.sha256()
  for field in (title, text):
    data = field.encode("utf-8")
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)
  return digest.digest()


def fingerprint_digests(block_ids: np.ndarray, digests: Sequence[bytes]) -> str:
  """The corpus fingerprint from block ids int64 [N] and their `block_digest`s, in any
  (the same) order."""
  block_ids = np.asarray(block_ids, np.int64)
  if len(digests) != len(block_ids):
    raise ValueError(f"{len(digests)} block digests for {len(block_ids)} block ids")
  order = np.argsort(block_ids, kind="stable")
  records = np.zeros(len(block_ids), [("id", "<i8"), ("digest", "S32")])
  records["id"] = block_ids[order]
  records["digest"] = np.asarray(digests, "S32")[order] if len(digests) else []
  return hashlib.sha256(records.tobytes()).hexdigest()


def corpus_fingerprint(block_ids: np.ndarray, titles: Sequence[str],
                       texts: Sequence[str]) -> str:
  """The fingerprint (module docstring) of N blocks: ids int64 [N], titles and texts."""
  if not len(block_ids) == len(titles) == len(texts):
    raise ValueError(f"{len(block_ids)} block ids, {len(titles)} titles and {len(texts)} texts")
  return fingerprint_digests(block_ids, [block_digest(t, x) for t, x in zip(titles, texts)])
