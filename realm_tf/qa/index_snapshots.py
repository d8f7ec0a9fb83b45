"""Fine-tuning's document index in the model directory, kept by the one index refresher.

The doc tower of step S (0: the pre-trained one; with index refresh, the query tower copied at
step S) embeds the corpus into the index version `index/step-<S, 8 digits>/` (published by
`realm_tf.retrieval.index_refresh.SynchronousRefresher` in `realm_tf.mips.index_publisher`'s
format, like pre-training's indexes) and is exported as `doc_embedder/step-<S>/`. A run that
starts again reuses the version of its checkpoint's S when the index still matches the doc
tower (`IndexRefresher.matches_doc_tower`), and versions that no kept checkpoint uses are
removed with their doc embedders (`checkpoint_versions`, `IndexRefresher.retain`).
"""
import os
from typing import Iterable, Set, Tuple

import tensorflow as tf

from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.mips import index_publisher
from realm_tf.models import precision
from realm_tf.retrieval import initial_index
from realm_tf.retrieval.corpus import Corpus
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
                    checkpoints: Iterable[str]) -> SynchronousRefresher:
  """The refresher of a fine-tuning run writing into model directory `directory` (each worker
  its own), started on the doc tower of step `snapshot` (its version reused if it matches the
  doc tower, else built), with the versions of `checkpoints` pinned. Every
  `index_refresh_steps` it embeds the corpus (N blocks, in the run's `tokenizer`'s wordpieces)
  with the doc tower in `embedding_dtype` into an embeddings file in `embedding_storage_dtype`
  and an `index_kind` index over it (`scann` settings); it keeps one version besides the
  pinned ones."""
  refresher = SynchronousRefresher(
      os.path.join(directory, INDEX_ROOT), task.index_refresh_steps, corpus,
      (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id), task.index_kind,
      task.model.block_length, compute_dtype=precision.resolve(task.embedding_dtype),
      keep_versions=1, scann=task.scann, snapshot_root=os.path.join(directory, EMBEDDER_ROOT),
      tokenizer=tokenizer, embedding_storage_dtype=task.embedding_storage_dtype)
  refresher.retain(checkpoint_versions(checkpoints))
  refresher.start(snapshot, retriever, index_publisher.version_for_step(snapshot),
                  check_doc_tower=True)
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
      embedding_dtype=task.embedding_dtype, storage_dtype=task.embedding_storage_dtype,
      embedder_dir=os.path.join(directory, embedder_dir))


def checkpoint_versions(checkpoints: Iterable[str]) -> Set[str]:
  """The index versions of the doc towers in `checkpoints` (paths; None entries skipped)."""
  return {index_publisher.version_for_step(int(tf.train.load_checkpoint(path).get_tensor(
      f"{SNAPSHOT_VARIABLE}/.ATTRIBUTES/VARIABLE_VALUE"))) for path in filter(None, checkpoints)}
