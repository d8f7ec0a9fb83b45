"""Fine-tuning's document index, one per doc-tower snapshot, in the model directory.

The doc tower of step S (0: the pre-trained one; with index refresh, the query tower copied at
step S) is exported as `doc_embedder-<S>/` and the corpus embedded through that export is
`doc_index-<S>/`. A run that starts again reuses the pair when the index still matches the
doc tower (a few blocks re-embedded and compared within `doc_index.embedding_tolerance`), and
snapshots that no kept checkpoint uses are removed.
"""
import os
import re
import time
from typing import Callable, Iterable, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.models import precision
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.doc_index import embedding_tolerance
from realm_tf.qa.finetune_config import FineTuneConfig
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

SNAPSHOT_VARIABLE = "doc_snapshot_step"


def snapshot_dirs(step: int) -> Tuple[str, str]:
  """The (doc index, doc embedder) directory names of the snapshot of `step`."""
  return f"doc_index-{step}", f"doc_embedder-{step}"


def snapshot_query_tower(retriever) -> None:
  """Copies the query tower into the doc tower (what shared towers would hold)."""
  retriever.doc_encoder.set_weights(retriever.query_encoder.get_weights())
  retriever.doc_projection.set_weights(retriever.query_projection.get_weights())


class IndexSnapshots:
  """The doc indexes of a fine-tuning run's doc-tower snapshots.

  Args:
    directory: where `doc_index-<S>/` and `doc_embedder-<S>/` are written.
    retriever: the retriever whose doc tower embeds the corpus.
    tokenizer, featurizer: the run's wordpieces and block packing.
    corpus: the knowledge corpus (N blocks).
    config: the run (`model.block_length`, `index_kind`, `scann`, `embedding_dtype`).
    log: called with one-line progress messages.
  """

  def __init__(self, directory: str, retriever, tokenizer: WordpieceTokenizer,
               featurizer: Featurizer, corpus: Corpus, config: FineTuneConfig,
               log: Callable[[str], None]):
    self.directory = directory
    self.retriever, self.tokenizer, self.featurizer = retriever, tokenizer, featurizer
    self.corpus, self.config, self.log = corpus, config, log

  def load_or_build(self, snapshot: int) -> DocIndex:
    """The index of the current doc tower, saved as the snapshot of step `snapshot`."""
    index_name, embedder_name = snapshot_dirs(snapshot)
    index_dir = os.path.join(self.directory, index_name)
    embedder_dir = os.path.join(self.directory, embedder_name)
    if DocIndex.exists(index_dir) and tf.io.gfile.exists(embedder_dir):
      doc_index = DocIndex.load(index_dir, self.corpus)
      if self.matches_doc_tower(doc_index):
        return doc_index
      self.log(f"{index_dir} was built by another doc tower; rebuilding it")
    start = time.perf_counter()
    for stale in (index_dir, embedder_dir):
      if tf.io.gfile.exists(stale):
        tf.io.gfile.rmtree(stale)
    config = self.config
    export_doc_embedder(self.retriever, embedder_dir, cls_id=self.tokenizer.cls_id,
                        sep_id=self.tokenizer.sep_id, pad_id=self.tokenizer.pad_id,
                        block_length=config.model.block_length, snapshot_step=snapshot,
                        tokenizer=self.tokenizer, compute_dtype=config.embedding_dtype)
    doc_index = DocIndex.build(DocEmbedder(embedder_dir), self.corpus, config.index_kind,
                               snapshot_step=snapshot, scann=config.scann,
                               embedding_dtype=precision.resolve(config.embedding_dtype))
    doc_index.save(index_dir)
    self.log(f"indexed {len(self.corpus)} blocks with the doc tower of step {snapshot} in "
             f"{time.perf_counter() - start:.1f} s ({index_dir})")
    return doc_index

  def matches_doc_tower(self, doc_index: DocIndex, sample: int = 4) -> bool:
    """Whether `doc_index` holds the current doc tower's embeddings (`sample` rows)."""
    corpus = self.corpus
    rows = np.unique(np.linspace(0, len(corpus) - 1, min(sample, len(corpus))).astype(int))
    blocks = self.featurizer.block_featurizer((
        tf.constant([corpus.titles[r] for r in rows], tf.string),
        tf.constant([corpus.texts[r] for r in rows], tf.string)))
    fresh = tf.cast(self.retriever.embed_documents(blocks, training=False), tf.float32).numpy()
    tolerance = embedding_tolerance((self.retriever.doc_encoder.compute_dtype,
                                     doc_index.embedding_dtype), float(np.max(np.abs(fresh))))
    return bool(np.allclose(fresh, doc_index.embeddings[rows], rtol=0.0, atol=tolerance))

  def prune(self, current: int, checkpoints: Iterable[str]) -> None:
    """Removes the snapshots used neither by `current` nor by any of `checkpoints` (paths of
    checkpoints holding a `doc_snapshot_step`)."""
    keep = {current}
    for path in filter(None, checkpoints):
      keep.add(int(tf.train.load_checkpoint(path).get_tensor(
          f"{SNAPSHOT_VARIABLE}/.ATTRIBUTES/VARIABLE_VALUE")))
    for name in tf.io.gfile.listdir(self.directory):
      found = re.fullmatch(r"doc_(?:index|embedder)-(\d+)/?", name)
      if found and int(found.group(1)) not in keep:
        tf.io.gfile.rmtree(os.path.join(self.directory, name.rstrip("/")))
