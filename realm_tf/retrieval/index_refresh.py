"""Keeping the MIPS index fresh while the retriever trains (REALM §3.3): the one refresher of
pre-training and of Open-QA fine-tuning's optional refresh.

Every index is published atomically as `<index_root>/step-<8-digit step>` (the doc tower's
step; `mips.index_publisher`), so the trainer only loads complete, verified indexes.
`SynchronousRefresher` re-embeds and rebuilds every N steps, blocking (tests, the stale-index
ablation, fine-tuning); `AsynchronousRefresher` (`retrieval.async_refresh`) leaves it to a
builder process. Staleness = current step − the index's snapshot step.

A swap loads a version without re-hashing it (`publish` verified it once, in the builder): it
costs reading the index, not hashing 6.8 GB on the trainer thread. Only the `keep_versions`
newest versions, the one in use and `retain(pinned)`'s are kept. A resumed frozen doc tower
reuses its step's version only if re-embedded blocks match (`matches_doc_tower`). With several
workers only the chief builds, and all swap to its version at the same step (docs/training.md).
"""
import abc
import os
import uuid
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from realm_tf import distribute
from realm_tf import errors
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.models import precision
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.columns import RaggedColumn
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.retrieval.embedding import embedding_tolerance
from realm_tf.signatures.doc_embedder import DocEmbedderExporter
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


class IndexBuilderError(RuntimeError):
  """The index builder failed `max_builder_failures` times in a row."""


_FAILED = -2  # what the chief sends the other workers when its builds failed


class IndexRefresher(abc.ABC):
  """Holds the index in use; subclasses decide when and how a new one is built.

  Args:
    index_root: where versions are published.
    every_n_steps: refresh period in trainer steps.
    store: the corpus (row order of every index).
    special_ids: (cls_id, sep_id, pad_id).
    kind: "scann" or "brute_force".
    block_length: packed block length.
    compute_dtype: "float32", "bfloat16" or "auto" (`models.precision`), the doc tower's
      precision when embedding.
    jit_compile: XLA-compile the doc tower's forward when embedding (in process, or in the
      builder's doc-embedder export).
    keep_versions: index versions kept after each swap (>= 1).
    scann: the ScaNN settings of every index built (kind "scann").
    sharding: the shard size of every index built (either kind).
    snapshot_root: where doc-embedder snapshots are exported ("": none, synchronous only).
    tokenizer: the doc tower's wordpieces: the corpus is embedded as
      `store.wordpieces(tokenizer)` (a JSONL corpus is tokenized) and the snapshots carry it
      (what embeds another corpus with them); None: the corpus's stored wordpieces (pipeline
      shards), no tokenizer in the snapshots.
    embedding_storage_dtype: "float32", "bfloat16" or "float16": each version built here also
      holds the block embeddings in that dtype (`retrieval.embedding_file`; a local
      `index_root`), memory-mapped as `embeddings` when loaded; "": none (the index's own).
  """

  def __init__(self, index_root: str, every_n_steps: int, store: Corpus,
               special_ids: Sequence[int],
               kind: str = "scann", block_length: int = BLOCK_LENGTH,
               compute_dtype: str = "float32",
               jit_compile: bool = False, keep_versions: int = 3,
               scann: index_builder.ScannSettings = index_builder.ScannSettings(),
               sharding: index_builder.Sharding = index_builder.Sharding(),
               snapshot_root: str = "", tokenizer: Optional[WordpieceTokenizer] = None,
               embedding_storage_dtype: str = ""):
    index_builder.check_kind(kind)
    if embedding_storage_dtype:
      embedding_file.check_storage_dtype(embedding_storage_dtype)
    if keep_versions < 1:
      raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
    self.keep_versions = keep_versions
    self.index_root, self.every_n_steps, self.store = index_root, max(1, every_n_steps), store
    self.special_ids, self.kind, self.block_length = tuple(special_ids), kind, block_length
    self.compute_dtype, self.jit_compile = compute_dtype, jit_compile
    self.scann, self.snapshot_root, self.tokenizer = scann, snapshot_root, tokenizer
    self.sharding = sharding
    self.embedding_storage_dtype = embedding_storage_dtype
    self.index: Optional[MipsIndex] = None
    self.embeddings: Optional[np.ndarray] = None  # the version's embeddings file, mapped
    self.metadata: Dict[str, Any] = {}  # what the version in use was published with
    self.pinned: Set[str] = set()  # versions retention keeps besides the newest
    self.version = ""
    self.snapshot_step = 0
    self.swaps = 0
    self.wait_seconds = 0.0  # how long the last `maybe_refresh` waited for another's build
    self._doc_tower_cache: Optional[DocTower] = None
    self._exporter: Optional[DocEmbedderExporter] = None  # the snapshots', traced once
    self._doc_input = doc_inputs.DEFAULT_DOC_INPUT  # the retriever's, set by `start`
    self._wordpieces_cache: Optional[Tuple[RaggedColumn, RaggedColumn]] = None
    self._strategy = tf.distribute.get_strategy()
    self._chief = True

  def _load(self, version: str) -> None:
    index = index_publisher.load_version(self.index_root, version, verify_checksums=False)
    where = os.path.join(self.index_root, version)
    metadata = index_publisher.read_metadata(self.index_root, version)
    built_from = metadata.get("corpus_fingerprint", self.store.fingerprint)
    if index.num_docs != len(self.store) or built_from != self.store.fingerprint:
      raise errors.InputError(errors.describe(
          where, f"index built from another corpus: {index.num_docs} blocks, corpus "
          f"fingerprint {str(built_from)[:12]}; the corpus has {len(self.store)} blocks, "
          f"fingerprint {self.store.fingerprint[:12]}", "Pass the --corpus it was built from, "
          "or a new --index_root for this corpus"))
    doc_inputs.check_index(doc_inputs.of_metadata(metadata), self._doc_input, where)
    self.embeddings = embedding_file.open_in(where, metadata, index.num_docs, index.dim,
                                             verify_checksum=False)
    self.index, self.version, self.metadata = index, version, metadata
    self.snapshot_step = index_publisher.step_of_version(version) or 0
    self.swaps += 1
    logging.info("Using index %s (snapshot step %d)", version, self.snapshot_step)
    if self._chief:
      self._prune()

  def retain(self, pinned: Iterable[str]) -> None:
    """Keeps the versions `pinned` names (and their snapshots) besides the `keep_versions`
    newest from now on, and deletes what is kept no longer."""
    self.pinned = set(pinned)
    if self._chief:
      self._prune()

  def _prune(self) -> List[str]:
    """Deletes all but the `keep_versions` newest index versions (never the one in use nor the
    pinned ones) and the snapshots (`_remove_snapshot`) of removed versions and of steps before
    the oldest version kept, except those `_busy` names; returns the versions left, oldest
    first."""
    versions = index_publisher.list_versions(self.index_root)
    if self.version not in set(versions[-self.keep_versions:]) | self.pinned:
      return versions  # a resumed run on an older version: keep everything until it swaps
    removed = index_publisher.keep_last(self.index_root, self.keep_versions, self.pinned)
    if removed:
      logging.info("Removed index versions %s (keeping the %d newest and %s)", removed,
                   self.keep_versions, sorted(self.pinned) or "no other")
    versions = [v for v in versions if v not in removed]
    if not versions or not self.snapshot_root or not tf.io.gfile.isdir(self.snapshot_root):
      return versions
    oldest = index_publisher.step_of_version(versions[0]) or 0
    busy = self._busy()
    for name in tf.io.gfile.listdir(self.snapshot_root):
      name = name.rstrip("/")
      step = index_publisher.step_of_version(name)
      if step is None or name in busy or (step >= oldest and name not in removed):
        continue
      self._remove_snapshot(name)
    return versions

  def _busy(self) -> Set[str]:
    """Snapshot names retention must spare (being built, or to be built)."""
    return set()

  def _remove_snapshot(self, name: str) -> None:
    tf.io.gfile.rmtree(os.path.join(self.snapshot_root, name))

  def _wordpieces(self) -> Tuple[RaggedColumn, RaggedColumn]:
    """(title_ids, body_ids) [N, (T)] of the corpus in the doc tower's vocabulary."""
    if self._wordpieces_cache is None:
      if self.tokenizer is not None:
        self._wordpieces_cache = self.store.wordpieces(self.tokenizer)
      elif self.store.title_ids is None:
        raise errors.InputError(errors.describe(
            self.store.source or "corpus", "the corpus has no stored wordpieces (it was not "
            "read from pipeline shards) and the index refresher was given no tokenizer",
            "Pass the refresher the model's tokenizer, or a blocks-*.tfrecord corpus"))
      else:
        self._wordpieces_cache = (self.store.title_ids, self.store.body_ids)
    return self._wordpieces_cache

  def _doc_tower(self, retriever: Retriever) -> DocTower:
    if self._doc_tower_cache is None or self._doc_tower_cache.retriever is not retriever:
      self._doc_tower_cache = DocTower(retriever, *self.special_ids,
                                       block_length=self.block_length,
                                       compute_dtype=self.compute_dtype,
                                       jit_compile=self.jit_compile)
    return self._doc_tower_cache

  def matches_doc_tower(self, retriever: Retriever, sample: int = 4) -> bool:
    """Whether the index in use holds `retriever`'s doc-tower embeddings of `sample` blocks
    (within `embedding_tolerance` of both precisions)."""
    rows = self.store.sampled_rows(sample)
    title_ids, body_ids = self._wordpieces()
    fresh = embed_blocks(self._doc_tower(retriever), title_ids.gather(rows),
                         body_ids.gather(rows))
    tolerance = embedding_tolerance(
        (precision.resolve(self.compute_dtype), self.metadata.get("embedding_dtype", "float32"),
         self.metadata.get(embedding_file.STORAGE_KEY, "float32")),
        float(np.max(np.abs(fresh))))
    stored = (self.index.document_embeddings()[rows] if self.embeddings is None else
              embedding_file.gather(self.embeddings, rows))
    return bool(np.allclose(fresh, stored, rtol=0.0, atol=tolerance))

  def _snapshot(self, step: int, retriever: Retriever) -> str:
    """Exports `retriever`'s doc tower as `<snapshot_root>/<version of step>`; returns it."""
    final = os.path.join(self.snapshot_root, index_publisher.version_for_step(step))
    tmp = f"{final}.tmp-{uuid.uuid4().hex}"
    if self._exporter is None or self._exporter.retriever is not retriever:
      self._exporter = DocEmbedderExporter(
          retriever, *self.special_ids, block_length=self.block_length,
          tokenizer=self.tokenizer, compute_dtype=self.compute_dtype,
          jit_compile=self.jit_compile)
    self._exporter.export(tmp, snapshot_step=step)
    if tf.io.gfile.exists(final):
      tf.io.gfile.rmtree(final)
    tf.io.gfile.rename(tmp, final)
    return final

  def _build_now(self, step: int, retriever: Retriever) -> None:
    """Embeds the corpus with the doc tower and publishes it as the version of `step`
    (replacing one of that name), with its doc-embedder snapshot if there is a
    `snapshot_root`, and with its embeddings file if there is an `embedding_storage_dtype`."""
    version = index_publisher.version_for_step(step)
    metadata = {"snapshot_step": step, "corpus_fingerprint": self.store.fingerprint,
                "embedding_dtype": precision.resolve(self.compute_dtype),
                **doc_inputs.metadata(retriever.doc_input)}
    tower = self._doc_tower(retriever)
    path = None
    if self.embedding_storage_dtype:
      tf.io.gfile.makedirs(self.index_root)
      # A `*.tmp-*` name, what `index_publisher.cleanup_partial` removes after a killed build.
      path = os.path.join(self.index_root, f"{version}.embeddings.tmp-{uuid.uuid4().hex}.npy")
      embeddings = embedding_file.create(path, len(self.store), tower.dim,
                                         self.embedding_storage_dtype)
      embed_blocks(tower, *self._wordpieces(), out=embeddings)
      embeddings.flush()
      metadata.update(embedding_file.metadata(path, self.embedding_storage_dtype))
    else:
      embeddings = embed_blocks(tower, *self._wordpieces())
    if self.snapshot_root:
      self._snapshot(step, retriever)
    if version in index_publisher.list_versions(self.index_root):
      tf.io.gfile.rmtree(os.path.join(self.index_root, version))  # another doc tower's

    def write(directory: str) -> None:
      if path is not None:  # the embeddings file first, so a published version is complete
        embedding_file.move_into(path, directory)
      index_builder.save_index(embeddings, directory, self.kind, self.scann,  # shard by shard
                               self.sharding)

    index_publisher.publish(write, self.index_root, version, metadata)
    self._load(version)

  def start(self, step: int, retriever: Retriever, resume_version: str = "",
            strategy=None, check_doc_tower: bool = False) -> None:
    """Loads the index a resumed run used (or the published one, else the newest complete),
    building one if none exists; `strategy` is the trainer's (the chief of several workers
    does all of this, the others load the chief's choice). `check_doc_tower`: the doc tower
    is frozen and the index must be its own: only `resume_version` is reused, if it
    `matches_doc_tower`; otherwise the version of `step` is built.

    Versions after `step` (published by a killed run after its last checkpoint) are deleted:
    this run builds them again from its own weights. `LATEST` is checked as everywhere, by
    `index_publisher.latest_version` (ValueError / FileNotFoundError naming the fix), also
    when the run resumes with its own `resume_version`.
    """
    self._strategy = strategy or tf.distribute.get_strategy()
    self._chief = distribute.is_chief(self._strategy)
    if retriever is not None:  # None: a refresher whose builder never embeds (its tests)
      self._doc_input = retriever.doc_input
    if self._chief:
      self._start(step, retriever, resume_version, check_doc_tower)
    self._follow_chief()

  def _start(self, step: int, retriever: Retriever, resume_version: str,
             check_doc_tower: bool) -> None:
    index_publisher.cleanup_partial(self.index_root)
    discarded = index_publisher.discard_after(self.index_root, step)
    if discarded:
      logging.info("Discarded indexes %s: built after the resumed step %d", discarded, step)
    published = index_publisher.latest_version(self.index_root)  # a bad `LATEST` stops a resume too
    versions = index_publisher.list_versions(self.index_root)
    if resume_version and resume_version in versions:
      self._load(resume_version)
      if check_doc_tower and not self.matches_doc_tower(retriever):
        logging.info("Index %s was built by another doc tower: rebuilding it", resume_version)
        self._build_now(step, retriever)
    elif versions and not check_doc_tower:
      self._load(published or versions[-1])
    else:
      self._build_now(step, retriever)

  def maybe_refresh(self, step: int, retriever: Retriever,
                    last_step: Optional[int] = None) -> bool:
    """Called after each step (on every worker); returns True when a new index was swapped in.
    With the run's `last_step`, no index is built that no step could use: none at the last
    step, and (asynchronous builds) none that would publish only after it.

    Raises:
      IndexBuilderError: the last `max_builder_failures` builds failed (on the chief, or
        reported by it).
    """
    swapped = False
    if self._chief:
      try:
        swapped = self._refresh(step, retriever, last_step)
      except IndexBuilderError:
        self._follow_chief(failed=True)  # the other workers stop with the chief
        raise
    swapped = self._follow_chief() or swapped
    if swapped:
      logging.info("Step %d: swapped to index %s", step, self.version)
    return swapped

  def _follow_chief(self, failed: bool = False) -> bool:
    """With several workers: the chief sends the version it uses (or that it `failed`), the
    others load it; returns True when this worker loaded a new version."""
    if distribute.num_workers(self._strategy) == 1:
      return False
    step = index_publisher.step_of_version(self.version)
    if self._chief and step is None:
      raise errors.InputError(errors.describe(
          os.path.join(self.index_root, self.version), "the index in use is not named "
          "step-<8-digit step>, the only names the chief can send the other workers",
          "Publish it as step-<snapshot step> (pipelines.build_index does)"))
    chosen = distribute.chief_value(self._strategy, _FAILED if failed else step or 0)
    if self._chief:
      return False
    if chosen == _FAILED:
      raise IndexBuilderError("stopping: the chief's index builds failed (its log says why)")
    version = index_publisher.version_for_step(chosen)
    if version == self.version:
      return False
    self._load(version)
    return True

  @abc.abstractmethod
  def _refresh(self, step: int, retriever: Retriever, last_step: Optional[int]) -> bool:
    """The chief's part of `maybe_refresh`."""

  def close(self) -> None:
    """Releases background resources."""


class SynchronousRefresher(IndexRefresher):
  """Rebuilds in the trainer's process every N steps, blocking."""

  def _refresh(self, step: int, retriever: Retriever, last_step: Optional[int]) -> bool:
    if step % self.every_n_steps or (last_step is not None and step >= last_step):
      return False
    self._build_now(step, retriever)
    return True
