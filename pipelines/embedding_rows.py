"""The embedding pipeline's shards as one [N, D] array, read a row range at a time.

Legend: N blocks, D embedding dimension, F embedding files, S index shards, M rows per shard.

The launcher of pipeline 3 never holds the N embeddings: `EmbeddingRows.check` streams the F
`embeddings-*.tfrecord` files once, batch by batch, against the corpus's canonical ids (each
block exactly once, in order, finite, dimension D) and keeps only each file's row count. The
result is an [N, D] array-like (`shape`, `dtype`, `rows[a:b]`) that
`realm_tf.mips.index_builder.save_index` slices one index shard at a time: a slice reads only
the files that overlap it. It is plain data, so a Beam worker can read its shard's rows too
(`build_shards_on_workers`: one `beam.Map` per index shard writing its directory).
"""
import dataclasses
import os
from typing import List, Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf

from pipelines import pipeline_io
from realm_tf import errors
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.mips import index_builder

EMBEDDINGS_PREFIX = "embeddings"
_BATCH = 4096


class IndexBuildError(errors.InputError):
  """The embeddings do not match the corpus (missing, duplicate or foreign block ids, wrong
  dimension, non-finite values); nothing was published."""


def shard_path(directory: str, shard: int, num_shards: int) -> str:
  return os.path.join(directory, f"{EMBEDDINGS_PREFIX}-{shard:05d}-of-{num_shards:05d}.tfrecord")


def read_batches(files: Sequence[str]):
  """(block_ids int64 [B], embeddings float32 [B, D]) batches of `files`, in order."""
  spec = {"block_id": formats.EMBEDDING_FEATURES["block_id"],
          "embedding": formats.EMBEDDING_FEATURES["embedding"]}
  for batch in tf.data.TFRecordDataset(list(files)).batch(_BATCH).map(
      lambda records: tf.io.parse_example(records, spec)):
    lengths = batch["embedding"].row_lengths().numpy()
    if lengths.size and lengths.min() != lengths.max():
      raise IndexBuildError(f"embeddings of different dimensions: {sorted(set(lengths))}")
    yield batch["block_id"].numpy(), batch["embedding"].to_tensor().numpy()


def shard_files(directory: str, num_shards: int) -> List[str]:
  """The F = `num_shards` embedding files in order, verified by `shards.check_shards`.

  Raises:
    ShardError: a missing, damaged, miscounted or unexpected shard.
  """
  files = shards.check_shards(directory, EMBEDDINGS_PREFIX).files
  expected = [shard_path(directory, s, num_shards) for s in range(num_shards)]
  if files != expected:
    raise shards.ShardError(errors.describe(
        directory, f"{len(files)} embedding shards, expected {num_shards} "
        f"({os.path.basename(expected[0])} ...)", "Rerun the index builder into an empty "
        "--embeddings_dir"))
  return files


@dataclasses.dataclass(frozen=True)
class EmbeddingRows:
  """float32 [N, D] rows of embedding files whose row counts are known; `rows[a:b]` reads
  the files overlapping [a, b) and returns float32 [b - a, D].

  Attributes:
    files: the F files, in row order.
    counts: rows of each file.
    dim: D.
  """
  files: Sequence[str]
  counts: Sequence[int]
  dim: int

  @property
  def shape(self):
    return (int(sum(self.counts)), self.dim)

  @property
  def dtype(self):
    return np.dtype(np.float32)

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, rows: slice) -> np.ndarray:
    start, stop, step = rows.indices(len(self))
    if step != 1:
      raise ValueError("EmbeddingRows reads contiguous row ranges only")
    out = np.empty((max(0, stop - start), self.dim), np.float32)
    first = 0
    for path, count in zip(self.files, self.counts):
      begin, end = max(start, first), min(stop, first + count)
      if begin < end:
        offset = first
        for _, vectors in read_batches([path]):
          lo, hi = max(begin, offset), min(end, offset + len(vectors))
          if lo < hi:
            out[lo - start:hi - start] = vectors[lo - offset:hi - offset]
          offset += len(vectors)
      first += count
    return out

  @classmethod
  def check(cls, directory: str, num_shards: int, corpus_ids: np.ndarray,
            dim: int) -> "EmbeddingRows":
    """Streams the embedding files of `directory` once, checking them against the corpus ids
    [N]; holds one batch at a time.

    Raises:
      ShardError: a missing, damaged or miscounted file.
      IndexBuildError: the embeddings are not exactly the corpus's, in order, finite, of
        dimension `dim`.
    """
    files = shard_files(directory, num_shards)
    counts, row = [], 0
    for path in files:
      count = 0
      for ids, vectors in read_batches([path]):
        _check_batch(ids, vectors, corpus_ids, row, dim)
        row += len(ids)
        count += len(ids)
      counts.append(count)
    if row != len(corpus_ids):
      raise IndexBuildError(f"{row} embeddings for {len(corpus_ids)} corpus blocks")
    return cls(tuple(files), tuple(counts), dim)


def _check_batch(ids: np.ndarray, vectors: np.ndarray, corpus_ids: np.ndarray, row: int,
                 dim: int) -> None:
  """Raises IndexBuildError unless rows [row, row + B) are the corpus's, finite, of `dim`."""
  expected = corpus_ids[row:row + len(ids)]
  if len(expected) < len(ids):
    raise IndexBuildError(f"more than {len(corpus_ids)} embeddings for {len(corpus_ids)} "
                          "corpus blocks")
  if not np.array_equal(ids, expected):
    wrong = np.nonzero(ids != expected)[0][0]
    raise IndexBuildError(
        f"embedding ids are not the corpus's canonical ids: first mismatch at row "
        f"{row + wrong} (id {ids[wrong]}, the corpus has {expected[wrong]})")
  if vectors.shape[1:] != (dim,):
    raise IndexBuildError(f"embeddings have shape [N, {vectors.shape[1:]}], expected [N, {dim}]")
  if not np.isfinite(vectors).all():
    raise IndexBuildError(f"{int((~np.isfinite(vectors)).sum())} non-finite embedding values "
                          f"in rows [{row}, {row + len(ids)})")


def _build_shard(job, rows: EmbeddingRows, directory: str, kind: str,
                 scann: index_builder.ScannSettings, sharding: index_builder.Sharding) -> str:
  """Builds and saves one index shard on a worker: job = (start, stop, sub-directory)."""
  start, stop, name = job
  index_builder.save_index(rows[start:stop], os.path.join(directory, name), kind, scann,
                           sharding)
  return name


def build_shards_on_workers(options, rows: EmbeddingRows, kind: str,
                            scann: index_builder.ScannSettings,
                            sharding: index_builder.Sharding, directory: str,
                            ranges: Sequence[range], names: Sequence[str]) -> None:
  """`index_builder.save_index`'s `build_shards` on Beam workers (`options`): one `beam.Map`
  per index shard reads its rows and writes `directory/names[s]`."""
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline
       | "IndexShards" >> beam.Create([(r.start, r.stop, n) for r, n in zip(ranges, names)])
       | "BuildShard" >> beam.Map(_build_shard, rows, directory, kind, scann, sharding))
  pipeline_io.run(pipeline)
