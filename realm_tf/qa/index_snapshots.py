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
import uuid
from typing import Iterable, Set, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import released_embeddings
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.models import precision
from realm_tf.qa.doc_index import EmbeddingMismatchError
from realm_tf.retrieval import embedding
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

SNAPSHOT_VARIABLE = "doc_snapshot_step"
_CHECKED_ROWS = 8  # sampled blocks re-embedded to check precomputed step-0 embeddings
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
  `block_emb`, `checkpoints.released_embeddings`) as the step-0 index of model directory
  `directory`, with the doc tower's export, as the refresher would have built them; the
  refresher then reuses them (`start_refresher`) instead of embedding every block.

  Raises:
    EmbeddingMismatchError: embeddings of another row count, or sampled blocks the doc tower
      embeds otherwise (naming the embeddings and the corpus).
  """
  embeddings, source = released_embeddings.open_released_embeddings(embeddings_path)
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  if len(embeddings) != len(corpus):
    raise EmbeddingMismatchError(errors.describe(
        source, f"{len(embeddings)} embeddings for the {len(corpus)} blocks of corpus "
        f"{corpus.source}", "Pass the embeddings of this corpus (the release's block_emb "
        "goes with its blocks.tfr)"))
  rows = np.unique(np.linspace(0, len(corpus) - 1, min(_CHECKED_ROWS, len(corpus))).astype(int))
  title_ids, body_ids = corpus.wordpieces(tokenizer)
  fresh = embedding.embed_blocks(embedding.DocTower(retriever, *special,
                                                    block_length=task.model.block_length),
                                 title_ids.gather(rows), body_ids.gather(rows))
  difference = float(np.max(np.abs(fresh - np.asarray(embeddings[rows], np.float32))))
  tolerance = embedding.embedding_tolerance(
      ("float32", precision.resolve(task.embedding_dtype)), float(np.max(np.abs(fresh))))
  if not difference <= tolerance:
    raise EmbeddingMismatchError(errors.describe(
        source, f"not the initial doc tower's embeddings of corpus {corpus.source}: "
        f"re-embedding {len(rows)} sampled blocks differs by up to {difference:.3g} "
        f"(tolerance {tolerance:.3g})", "Initialise the retriever from the embedder these "
        "embeddings came from (--init_realm_embedder), or leave --init_index out"))
  index_root = os.path.join(directory, INDEX_ROOT)
  version = index_publisher.version_for_step(0)
  tf.io.gfile.makedirs(index_root)
  path = os.path.join(index_root, f"{version}.embeddings.tmp-{uuid.uuid4().hex}.npy")
  storage_dtype = task.embedding_storage_dtype
  out = embedding_file.copy_rows(embeddings, path, storage_dtype)
  metadata = {"snapshot_step": 0, "corpus_fingerprint": corpus.fingerprint,
              "embedding_dtype": precision.resolve(task.embedding_dtype),
              **embedding_file.metadata(path, storage_dtype)}

  def write(version_dir: str) -> None:
    embedding_file.move_into(path, version_dir)
    index_builder.save_index(out, version_dir, task.index_kind, task.scann)

  index_publisher.publish(write, index_root, version, metadata)
  export_doc_embedder(retriever, os.path.join(directory, EMBEDDER_ROOT, version), *special,
                      block_length=task.model.block_length, snapshot_step=0,
                      tokenizer=tokenizer)


def checkpoint_versions(checkpoints: Iterable[str]) -> Set[str]:
  """The index versions of the doc towers in `checkpoints` (paths; None entries skipped)."""
  return {index_publisher.version_for_step(int(tf.train.load_checkpoint(path).get_tensor(
      f"{SNAPSHOT_VARIABLE}/.ATTRIBUTES/VARIABLE_VALUE"))) for path in filter(None, checkpoints)}
