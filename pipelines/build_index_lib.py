"""Pipeline 3, the index builder: blocks -> embeddings -> MIPS index, published atomically.

    ReadBlocks -> EmbedBlocks (RunInference over the doc-embedder export, batches of one
                  length bucket) -> WriteEmbeddingShards (range-sharded by block id, sorted)
    then, in the launching process: check the shards against the corpus, build the index one
    shard of <= `--index_shard_size` rows at a time, `index_publisher.publish`.

The builder of REALM's asynchronous refresh (`python -m pipelines.build_index`, or
`build_index(...)`). Embedding shard s of S holds the block ids of [s·2^63/S, (s+1)·2^63/S) in
ascending order (ids are uniform hashes, so shards balance): read in name order they are the
canonical order, with no global sort. Before publishing, every corpus block must have exactly
one embedding, the ids must be the corpus's canonical ids and the N embeddings finite with the
export's D; the launcher never holds all N x D (BENCHMARKS.md §9). Counters: `blocks_embedded`,
`embedding_batches`, `embedding_shards`.
"""
import dataclasses
import functools
import math
import os
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
import numpy as np
import tensorflow as tf

from pipelines import beam_runner
from pipelines import block_records
from pipelines import embedding_rows
from pipelines import pipeline_io
from realm_tf import errors
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.retrieval import embedding
from realm_tf.retrieval.block_fit import check_blocks_fit
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_attributes
from realm_tf.signatures.doc_embedder import export_tokenizer
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.bert_packer import padded_length

EMBEDDINGS_PREFIX = embedding_rows.EMBEDDINGS_PREFIX
IndexBuildError = embedding_rows.IndexBuildError
shard_path = embedding_rows.shard_path

BLOCKS_PER_SHARD = 100_000
BATCHES_PER_GROUP = 64  # build_index: ~N / (64 batches) groups per length bucket
_ID_SPACE = 1 << 63


@dataclasses.dataclass
class IndexBuild:
  """What `build_index` published.

  Attributes:
    version: the published version.
    directory: `<index_root>/<version>`.
    num_blocks: N.
    metadata: the metadata stored with the index.
    counters: the pipeline's counters.
  """
  version: str
  directory: str
  num_blocks: int
  metadata: Dict[str, object]
  counters: Dict[str, int]


def shard_of(block_id: int, num_shards: int) -> int:
  """The embedding shard of `block_id`: its range of the 63-bit id space."""
  return (int(block_id) * num_shards) >> 63


def length_bucket(block: block_records.BlockRecord, multiple: int, block_length: int,
                  doc_input: str = doc_inputs.DEFAULT_DOC_INPUT) -> int:
  """The packed length of `block` (`[CLS] title [SEP] body [SEP]`, or `[CLS] body [SEP]` for
  `doc_input` "body"; capped at `block_length`) rounded up to a multiple of `multiple`: the
  padded length the export embeds it at."""
  return padded_length(doc_inputs.packed_lengths(len(block.title_ids), len(block.body_ids),
                                                 doc_input), multiple, block_length)


class DocEmbedderHandler(ModelHandler):
  """Beam `RunInference` handler of a doc-embedder export: one example is a batch of
  `BlockRecord`s of one length bucket -> [(block_id, float32 [D])]; the model is loaded once
  per worker.

  A batch goes through `retrieval.embedding.embed_blocks` as one batch of `blocks_per_batch`
  (with an XLA-compiled export a short batch is padded to that many rows, so that every call
  has one of the few (rows, bucket length) shapes XLA compiled).
  """

  def __init__(self, embedder_dir: str, blocks_per_batch: int):
    super().__init__(min_batch_size=1, max_batch_size=1)  # an example is a whole batch
    self._embedder_dir = embedder_dir
    self._blocks_per_batch = blocks_per_batch
    self._blocks = beam_runner.counter("blocks_embedded")
    self._batches = beam_runner.counter("embedding_batches")

  def load_model(self) -> embedding.ExportTower:
    return embedding.ExportTower(DocEmbedder(self._embedder_dir))

  def run_inference(self, batch: Sequence[List[block_records.BlockRecord]],
                    model: embedding.ExportTower,
                    inference_args=None) -> List[List[Tuple[int, np.ndarray]]]:
    return [self._embed(blocks, model) for blocks in batch]

  def _embed(self, blocks: List[block_records.BlockRecord], model: embedding.ExportTower):
    ragged = lambda rows: tf.RaggedTensor.from_row_lengths(
        np.concatenate(rows + [np.zeros([0], np.int64)]), np.array([len(r) for r in rows],
                                                                   np.int64))
    embeddings = embedding.embed_blocks(  # [B, D]
        model, ragged([b.title_ids for b in blocks]), ragged([b.body_ids for b in blocks]),
        batch_size=self._blocks_per_batch)
    self._batches.inc()
    self._blocks.inc(len(blocks))
    return [(block.block_id, vector) for block, vector in zip(blocks, embeddings)]


def _batches(keyed_blocks, blocks_per_batch: int):
  """(key, blocks of one length bucket) -> lists of at most `blocks_per_batch` blocks, in
  block-id order: the same batches whatever order the runner grouped them in, so embeddings
  (and the index files) do not depend on the runner."""
  blocks = sorted(keyed_blocks[1], key=lambda b: b.block_id)
  for begin in range(0, len(blocks), blocks_per_batch):
    yield blocks[begin:begin + blocks_per_batch]


class EmbedBlocks(beam.PTransform):
  """`BlockRecord`s -> (shard, (block_id, embedding)) with a doc-embedder export.

  Length bucketing: blocks are keyed by their padded length (`length_bucket`, with the
  export's `length_multiple`) and a group number (block id mod `groups_per_bucket`, so a
  bucket spreads over that many workers), grouped, cut into batches of `blocks_per_batch`
  and embedded by Beam's `RunInference` with `DocEmbedderHandler`, so a batch of short
  blocks is not padded to 288 wordpieces (Wikipedia blocks average well under half of that;
  BENCHMARKS.md §1). The grouping is ours rather than `RunInference`'s own length-aware
  batching (`batch_length_fn`): in Beam 2.77 that batching is stateful and, on the
  DirectRunner in batch mode, left a bucket's last partial batch unembedded (88 of 90 blocks).

  Args:
    embedder_dir: a `realm_tf.signatures.doc_embedder` SavedModel.
    num_shards: S, the embedding shards.
    blocks_per_batch: blocks per embedder call.
    groups_per_bucket: parallelism within one length bucket.
  """

  def __init__(self, embedder_dir: str, num_shards: int, blocks_per_batch: int = 128,
               groups_per_bucket: int = 1):
    super().__init__()
    self.embedder_dir = embedder_dir
    self.num_shards = num_shards
    self.blocks_per_batch = blocks_per_batch
    self.groups_per_bucket = max(1, groups_per_bucket)

  def expand(self, blocks):
    attributes = export_attributes(self.embedder_dir)
    multiple, block_length = attributes.length_multiple, attributes.block_length
    groups, num_shards = self.groups_per_bucket, self.num_shards
    key = lambda b: (length_bucket(b, multiple, block_length, attributes.doc_input),
                     b.block_id % groups)
    return (blocks
            | "KeyByLength" >> beam.Map(lambda b: (key(b), b))
            | "GroupByLength" >> beam.GroupByKey()
            | "Batch" >> beam.FlatMap(_batches, self.blocks_per_batch)
            | "Embed" >> RunInference(DocEmbedderHandler(self.embedder_dir,
                                                         self.blocks_per_batch))
            | "Unbatch" >> beam.FlatMap(lambda embedded: embedded)
            | "KeyByShard" >> beam.Map(lambda e: (shard_of(e[0], num_shards), e)))


class _WriteShardFn(beam.DoFn):
  """(shard, [(block_id, embedding)]) -> the shard file, ids ascending; yields (shard, n)."""

  def __init__(self, directory: str, num_shards: int):
    super().__init__()
    self._directory = directory
    self._num_shards = num_shards
    self._shards = beam_runner.counter("embedding_shards")

  def process(self, keyed):
    shard, rows = keyed
    rows = sorted((r for r in rows if r is not None), key=lambda r: r[0])
    final = shard_path(self._directory, shard, self._num_shards)
    tmp = f"{final}.tmp-{uuid.uuid4().hex}"  # a retried bundle rewrites the same content
    with tf.io.TFRecordWriter(tmp) as writer:
      for block_id, vector in rows:
        writer.write(formats.embedding_example(block_id, vector))
    tf.io.gfile.rename(tmp, final, overwrite=True)
    self._shards.inc()
    yield shard, len(rows)


class WriteEmbeddingShards(beam.PTransform):
  """(shard, (block_id, embedding)) -> `embeddings-SSSSS-of-NNNNN.tfrecord`, every shard
  written (empty ones too), each in ascending block id order. Returns (shard, count)."""

  def __init__(self, directory: str, num_shards: int):
    super().__init__()
    self.directory = directory
    self.num_shards = num_shards

  def expand(self, keyed_embeddings):
    every_shard = (keyed_embeddings.pipeline
                   | "AllShards" >> beam.Create([(s, None) for s in range(self.num_shards)]))
    return ((keyed_embeddings, every_shard)
            | "Flatten" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(_WriteShardFn(self.directory, self.num_shards)))


def read_embedding_shards(directory: str, num_shards: int) -> Tuple[np.ndarray, np.ndarray]:
  """Concatenates the shards in order (all of them in memory: for inspection and tests; the
  builder reads them as `EmbeddingRows`), verified by `shards.check_shards`.

  Returns:
    (block_ids int64 [N], embeddings float32 [N, D]).

  Raises:
    ShardError: a missing, damaged or miscounted shard.
  """
  ids, rows = [], []
  for batch_ids, vectors in embedding_rows.read_batches(
      embedding_rows.shard_files(directory, num_shards)):
    ids.append(batch_ids)
    rows.append(vectors)
  if not ids:
    return np.zeros([0], np.int64), np.zeros([0, 0], np.float32)
  dims = {r.shape[1] for r in rows}
  if len(dims) != 1:
    raise IndexBuildError(f"embeddings of different dimensions: {sorted(dims)}")
  return np.concatenate(ids).astype(np.int64, copy=False), np.concatenate(rows)


def publish_embeddings(embeddings_dir: str, num_shards: int, corpus_ids: np.ndarray, dim: int,
                       index_root: str, version: str, metadata: Dict[str, object],
                       kind: str = "scann",
                       scann: index_builder.ScannSettings = index_builder.ScannSettings(),
                       sharding: index_builder.Sharding = index_builder.Sharding(),
                       options: Optional[PipelineOptions] = None) -> str:
  """The launching process's part after the pipeline: checks the S embedding shards against
  the corpus ids [N] in one streaming pass (`EmbeddingRows.check`), builds the index one
  index shard at a time (`index_builder.save_index`: on the Beam workers of `options` when
  its runner is not the local one, else here) and publishes it as `version` (verified shard
  by shard); returns its directory. It holds one index shard's embeddings at a time, never
  all N (bench/index_builder_memory.py)."""
  rows = embedding_rows.EmbeddingRows.check(embeddings_dir, num_shards, corpus_ids, dim)
  build_shards = None
  if options is not None and (options.view_as(StandardOptions).runner !=
                              beam_runner.LOCAL_RUNNER):
    build_shards = functools.partial(embedding_rows.build_shards_on_workers, options, rows,
                                     kind, scann, sharding)
  write = lambda directory: index_builder.save_index(rows, directory, kind, scann, sharding,
                                                     build_shards)
  return index_publisher.publish(write, index_root, version, metadata)


def build_pipeline(pipeline: beam.Pipeline, corpus_dir: str, embedder_dir: str,
                   embeddings_dir: str, num_shards: int, blocks_per_batch: int = 128,
                   groups_per_bucket: int = 1, verify: bool = True):
  """Adds the embedding stage to `pipeline`; returns the (shard, count) PCollection.
  `verify`: check the block shards (`block_records.block_files`)."""
  return (pipeline
          | "ReadBlocks" >> block_records.ReadBlocks(corpus_dir, verify,
                                                    embedder_dir=embedder_dir)
          | "EmbedBlocks" >> EmbedBlocks(embedder_dir, num_shards, blocks_per_batch,
                                         groups_per_bucket)
          | "WriteEmbeddingShards" >> WriteEmbeddingShards(embeddings_dir, num_shards))


def run_pipeline(pipeline: beam.Pipeline, corpus_dir: str, embedder_dir: str,
                 embeddings_dir: str, num_shards: int, blocks_per_batch: int = 128,
                 groups_per_bucket: int = 1, verify: bool = True) -> Dict[str, int]:
  """Builds the embedding stage on `pipeline`, runs it, writes the embeddings' manifest
  (`embeddings.manifest.json`) and returns its counters."""
  shards.remove_manifest(embeddings_dir, EMBEDDINGS_PREFIX)
  build_pipeline(pipeline, corpus_dir, embedder_dir, embeddings_dir, num_shards,
                 blocks_per_batch, groups_per_bucket, verify)
  counters = pipeline_io.run(pipeline)
  shards.write_manifest(embeddings_dir, EMBEDDINGS_PREFIX, {
      "corpus_dir": corpus_dir, "embedder_dir": embedder_dir, "num_shards": num_shards,
      "blocks_per_batch": blocks_per_batch})
  return counters


def build_index(corpus_dir: str, embedder_dir: str, index_root: str, kind: str = "scann",
                version: str = "", pipeline_options: str = "", embeddings_dir: str = "",
                num_shards: int = 0, blocks_per_batch: int = 128,
                scann: index_builder.ScannSettings = index_builder.ScannSettings(),
                sharding: index_builder.Sharding = index_builder.Sharding()) -> IndexBuild:
  """Embeds every block of `corpus_dir`, builds the index and publishes it.

  Args:
    corpus_dir: the block shards of pipeline 1.
    embedder_dir: a doc-embedder export (`realm_tf.signatures.doc_embedder`).
    index_root: where versions and `LATEST` live (`realm_tf.mips.index_publisher`).
    kind: "scann" or "brute_force".
    version: the version to publish; "" = `version_for_step(export's snapshot_step)` (step 0
      for an export without a step).
    pipeline_options: Beam options for the embedding stage (`--pipeline_options`).
    embeddings_dir: keep the embedding shards there; "" = a temporary work directory.
    num_shards: S; 0 = one per `BLOCKS_PER_SHARD` blocks.
    blocks_per_batch: blocks per embedder call.
    scann: the ScaNN settings (kind "scann"), checked against the corpus before embedding.
    sharding: the index's shard size (either kind).

  Returns:
    the `IndexBuild`.

  Raises:
    IndexBuildError: the embeddings do not match the corpus.
    InputError: an unknown kind, or ScaNN settings that do not fit the corpus.
    FileExistsError: the version is published already.
  """
  index_builder.check_kind(kind)
  pipeline_io.check_output_dir(index_root, "--index_root")
  if version:
    index_publisher.check_version(version, "--version")
  shards.check_directory(embedder_dir, "a doc-embedder export (--embedder_dir)",
                         "Pass a directory written by `export_doc_embedder`")
  corpus_ids, fingerprint = block_records.corpus_ids_and_fingerprint(corpus_dir)  # verified
  if len(corpus_ids) == 0:
    raise IndexBuildError(errors.describe(
        corpus_dir, "the corpus has no blocks", "Pass the output of pipelines.wikipedia_to_blocks"))
  attributes = export_attributes(embedder_dir)
  check_blocks_fit(Corpus.load(corpus_dir), export_tokenizer(embedder_dir),
                   attributes.block_length, f"of {embedder_dir}")
  snapshot_step, dim = attributes.snapshot_step, attributes.embedding_dim
  if kind == "scann":
    scann.check(len(corpus_ids), dim, sharding)  # bad settings fail now, not after embedding
  version = version or index_publisher.version_for_step(max(0, snapshot_step))
  if tf.io.gfile.exists(os.path.join(index_root, version)):
    raise FileExistsError(f"index version {version} exists already in {index_root}")
  num_shards = num_shards or max(1, math.ceil(len(corpus_ids) / BLOCKS_PER_SHARD))
  work_dir = embeddings_dir or os.path.join(
      index_root, f"{version}.tmp-{uuid.uuid4().hex}-{EMBEDDINGS_PREFIX}")
  tf.io.gfile.makedirs(work_dir)
  try:
    options = beam_runner.pipeline_options(pipeline_options)
    pipeline = beam.Pipeline(options=options)
    groups_per_bucket = max(1, len(corpus_ids) // (blocks_per_batch * BATCHES_PER_GROUP))
    counters = run_pipeline(pipeline, corpus_dir, embedder_dir, work_dir, num_shards,
                            blocks_per_batch, groups_per_bucket, verify=False)
    metadata = {"corpus_fingerprint": fingerprint,
                "snapshot_step": snapshot_step, "embedder_dir": embedder_dir,
                "num_blocks": int(len(corpus_ids)), **doc_inputs.metadata(attributes.doc_input)}
    directory = publish_embeddings(work_dir, num_shards, corpus_ids, dim, index_root, version,
                                   metadata, kind, scann, sharding, options)
  finally:
    if not embeddings_dir and tf.io.gfile.exists(work_dir):
      tf.io.gfile.rmtree(work_dir)
  return IndexBuild(version, directory, int(len(corpus_ids)), metadata, counters)
