"""Fine-tuning's document index in the model directory, kept by the one index refresher.

The doc tower of step S (0: the pre-trained one; with index refresh, the query tower copied at
step S, or the trained doc tower of step S) embeds the corpus into the index version
`index/step-<S, 8 digits>/` (published by `realm_tf.retrieval.index_refresh`'s refreshers in
`realm_tf.mips.index_publisher`'s format, like pre-training's indexes) and is exported as
`doc_embedder/step-<S>/`. A run that starts again reuses the version of its checkpoint's S
(a frozen doc tower's only when the index still matches it,
`IndexRefresher.matches_doc_tower`), and versions that no kept checkpoint uses are removed
with their doc embedders (`checkpoint_versions`, `IndexRefresher.retain`).
"""
import os
from typing import Iterable, Set, Tuple

import tensorflow as tf

from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.mips import index_publisher
from realm_tf.models import precision
from realm_tf.retrieval import initial_index
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.async_refresh import AsynchronousRefresher
from realm_tf.retrieval.index_refresh import IndexRefresher
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

SNAPSHOT_VARIABLE = "doc_snapshot_step"
INDEX_ROOT = "index"
EMBEDDER_ROOT = "doc_embedder"


def snapshot_dirs(step: int) -> Tuple[str, str]:
  """The (doc index, doc embedder) paths, relative to the model directory, of step `step`."""
  version = index_publisher.version_for_step(step)
  return os.path.join(INDEX_ROOT, version), os.path.join(EMBEDDER_ROOT, version)


def snapshot_query_tower(retriever) -> None:
  """Copies the query tower into the doc tower (what shared towers would hold)."""
  retriever.doc_encoder.set_weights(retriever.query_encoder.get_weights())
  retriever.doc_projection.set_weights(retriever.query_projection.get_weights())


def start_refresher(directory: str, corpus: Corpus, tokenizer: WordpieceTokenizer,
                    task: OpenQATaskConfig, retriever, snapshot: int,
                    checkpoints: Iterable[str], resumed: bool = False) -> IndexRefresher:
  """The refresher of a fine-tuning run writing into model directory `directory` (each worker
  its own), started on the doc tower of step `snapshot`, with the versions of `checkpoints`
  pinned. The version of `snapshot` is reused if it matches the doc tower, else built; in a
  `resumed` run whose doc tower trains (`task.train_doc_tower`) the doc tower has moved since
  its snapshot, so that version is reused as it is. Every `index_refresh_steps` the corpus (N blocks, in the run's `tokenizer`'s
  wordpieces) is embedded by the doc tower in `embedding_dtype` into an `index_kind` index
  (`scann` settings): synchronously, with an embeddings file in `embedding_storage_dtype`, or
  (`task.refresh="async"`) by the index-builder process from a doc-embedder snapshot. One
  version is kept besides the pinned ones and the one in use."""
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  shared = dict(compute_dtype=precision.resolve(task.embedding_dtype), keep_versions=1,
                scann=task.scann, sharding=task.sharding, tokenizer=tokenizer)
  index_root, embedder_root = (os.path.join(directory, INDEX_ROOT),
                               os.path.join(directory, EMBEDDER_ROOT))
  if task.refresh == "async":
    refresher = AsynchronousRefresher(
        index_root, task.index_refresh_steps, corpus, special, corpus.directory,
        embedder_root, task.index_kind, task.model.block_length, list(task.builder_args),
        max_builder_failures=task.max_builder_failures,
        max_staleness=task.max_index_staleness, **shared)
  else:
    refresher = SynchronousRefresher(
        index_root, task.index_refresh_steps, corpus, special, task.index_kind,
        task.model.block_length, snapshot_root=embedder_root,
        embedding_storage_dtype=task.embedding_storage_dtype, **shared)
  refresher.retain(checkpoint_versions(checkpoints))
  refresher.start(snapshot, retriever, index_publisher.version_for_step(snapshot),
                  check_doc_tower=not (task.train_doc_tower and resumed))
  return refresher


def publish_initial_index(directory: str, corpus: Corpus, tokenizer: WordpieceTokenizer,
                          task: OpenQATaskConfig, retriever, embeddings_path: str) -> None:
  """Publishes precomputed embeddings of `corpus` by the initial doc tower (the released
  `block_emb`) as the step-0 index of model directory `directory`, with the doc tower's
  export, as the refresher would have built them (`retrieval.initial_index`); the refresher
  then reuses them (`start_refresher`) instead of embedding every block.

  Raises:
    errors.EmbeddingMismatchError: embeddings of another row count, or sampled blocks the doc
      tower embeds otherwise (naming the embeddings and the corpus).
  """
  _, embedder_dir = snapshot_dirs(0)
  initial_index.publish_initial_index(
      os.path.join(directory, INDEX_ROOT), corpus, tokenizer, retriever, embeddings_path,
      block_length=task.model.block_length, kind=task.index_kind, scann=task.scann,
      sharding=task.sharding, embedding_dtype=task.embedding_dtype,
      storage_dtype=task.embedding_storage_dtype,
      embedder_dir=os.path.join(directory, embedder_dir))


def checkpoint_versions(checkpoints: Iterable[str]) -> Set[str]:
  """The index versions of the doc towers in `checkpoints` (paths; None entries skipped)."""
  return {index_publisher.version_for_step(int(tf.train.load_checkpoint(path).get_tensor(
      f"{SNAPSHOT_VARIABLE}/.ATTRIBUTES/VARIABLE_VALUE"))) for path in filter(None, checkpoints)}
