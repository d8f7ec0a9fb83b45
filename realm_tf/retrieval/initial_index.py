"""A precomputed step-0 index: the initial doc tower's embeddings of the corpus, published
without embedding every block (the released `block_emb`, 13.3M x 128, by the REALM embedder
that starts fine-tuning or pre-training).

The embeddings (`checkpoints.released_embeddings`: a `block_emb` checkpoint or a `.npy`) are
checked against the corpus's row count and against the doc tower on a few sampled blocks,
copied a chunk of rows at a time into the version's embeddings file, and published as the
version of step 0 in `realm_tf.mips.index_publisher`'s format, as
`retrieval.index_refresh`'s refreshers build it, so a refresher starting at step 0 loads it.
"""
import os
import uuid
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import released_embeddings
from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.models import precision
from realm_tf.retrieval import embedding
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.columns import RaggedColumn
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_CHECKED_ROWS = 8  # sampled blocks re-embedded to check the embeddings


def check_embeddings(embeddings: np.ndarray, source: str, corpus: Corpus,
                     wordpieces: Sequence[RaggedColumn], tower: embedding.DocTower,
                     compute_dtype: str, fix: str) -> None:
  """Raises `errors.EmbeddingMismatchError` (naming `source` and the corpus, with `fix`) unless
  `embeddings` [N, D] has a row per block and `tower` (in `compute_dtype`) embeds sampled
  blocks (`wordpieces`: (title_ids, body_ids)) into their rows within
  `embedding.embedding_tolerance`."""
  if len(embeddings) != len(corpus):
    raise errors.EmbeddingMismatchError(errors.describe(
        source, f"{len(embeddings)} embeddings for the {len(corpus)} blocks of corpus "
        f"{corpus.source}", "Pass the embeddings of this corpus (the release's block_emb "
        "goes with its blocks.tfr)"))
  rows = corpus.sampled_rows(_CHECKED_ROWS)
  title_ids, body_ids = wordpieces
  fresh = embedding.embed_blocks(tower, title_ids.gather(rows), body_ids.gather(rows))
  difference = float(np.max(np.abs(fresh - np.asarray(embeddings[rows], np.float32))))
  tolerance = embedding.embedding_tolerance(
      ("float32", compute_dtype), float(np.max(np.abs(fresh))))
  if not difference <= tolerance:
    raise errors.EmbeddingMismatchError(errors.describe(
        source, f"not the initial doc tower's embeddings of corpus {corpus.source}: "
        f"re-embedding {len(rows)} sampled blocks differs by up to {difference:.3g} "
        f"(tolerance {tolerance:.3g})", fix))


def publish_initial_index(index_root: str, corpus: Corpus, tokenizer: WordpieceTokenizer,
                          retriever, embeddings_path: str, *, block_length: int,
                          kind: str, scann: index_builder.ScannSettings,
                          sharding: index_builder.Sharding = index_builder.Sharding(),
                          embedding_dtype: str = "auto", storage_dtype: str = "float32",
                          embedder_dir: Optional[str] = None) -> str:
  """Publishes the embeddings at `embeddings_path` of `corpus` (in `tokenizer`'s wordpieces)
  by `retriever`'s doc tower as the step-0 version of `index_root` (a `kind` index, embeddings
  stored in `storage_dtype`), and exports that doc tower to `embedder_dir` when given (the
  refresher's snapshot of step 0); returns the version.

  Raises:
    errors.EmbeddingMismatchError: embeddings of another row count, or sampled blocks the
      doc tower embeds otherwise (naming the embeddings and the corpus).
  """
  embeddings, source = released_embeddings.open_released_embeddings(embeddings_path)
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  compute_dtype = precision.resolve(embedding_dtype)
  tower = embedding.DocTower(retriever, *special, block_length=block_length,
                             compute_dtype=compute_dtype)
  check_embeddings(embeddings, source, corpus, corpus.wordpieces(tokenizer), tower,
                   compute_dtype,
                   "Initialise the retriever from the embedder these embeddings came from "
                   "(--init_realm_embedder), or leave --init_index out")
  version = index_publisher.version_for_step(0)
  tf.io.gfile.makedirs(index_root)
  if version in index_publisher.list_versions(index_root):  # a run killed before it saved
    tf.io.gfile.rmtree(os.path.join(index_root, version))
  # A `*.tmp-*` name, what `index_publisher.cleanup_partial` removes after a killed copy.
  path = os.path.join(index_root, f"{version}.embeddings.tmp-{uuid.uuid4().hex}.npy")
  out = embedding_file.copy_rows(embeddings, path, storage_dtype)
  metadata = {"snapshot_step": 0, "corpus_fingerprint": corpus.fingerprint,
              "embedding_dtype": compute_dtype, "precomputed_from": source,
              **embedding_file.metadata(path, storage_dtype),
              **doc_inputs.metadata(retriever.doc_input)}

  def write(version_dir: str) -> None:
    embedding_file.move_into(path, version_dir)
    index_builder.save_index(out, version_dir, kind, scann, sharding)

  index_publisher.publish(write, index_root, version, metadata)
  if embedder_dir:
    export_doc_embedder(retriever, embedder_dir, *special, block_length=block_length,
                        snapshot_step=0, tokenizer=tokenizer)
  return version
