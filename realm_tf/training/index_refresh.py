"""Keeping the MIPS index fresh while the retriever trains (REALM §3.3 / Appendix A).

Every index is published under `<index_root>/step-XXXXXXXX` (the step of the doc-embedder
weights it was built from) by `realm_tf.mips.index_publisher`, atomically, with `LATEST`
pointing at the newest; the trainer only ever loads complete, verified indexes.

* `SynchronousRefresher`: every N steps, re-embed all blocks with the current doc tower and
  rebuild, blocking the trainer (tests, and the stale-index ablation with a large N).
* `AsynchronousRefresher`: every N steps, export a doc-embedder snapshot; an index-builder
  process (`python -m pipelines.build_index`, or the same Beam pipeline on a cluster runner)
  embeds and publishes in the background; between steps the trainer swaps in the newest
  published index without pausing. A builder that dies leaves no partial index in use.
Staleness = current step − snapshot step of the index in use.

The trainer loads a published version without re-hashing it: `publish` verified its sha256
checksums once, in the process that built it (the builder), so a swap costs reading the
index, not hashing 6.8 GB on the trainer thread. Retention: after each swap only the
`keep_versions` newest index versions (and the one in use) are kept, and the asynchronous
refresher deletes the doc-embedder snapshots (and their builder logs) older than the oldest
kept version, so a long run's disk use is bounded.

The builder is supervised: its stdout and stderr go to `<snapshot_root>/builder-<version>.log`
(a local temporary directory when `snapshot_root` is a URL), never to an undrained pipe, which a
chatty builder fills and then blocks on. A failed build
(non-zero exit, killed, or exit 0 without publishing its version) is logged as an error at once,
with the end of its log and the command that reproduces it; after `max_builder_failures`
consecutive failures `maybe_refresh` raises `IndexBuilderError`, so training stops instead of
going on with an ever staler index. `close()` reports a build that failed since the last check
and terminates a running one.

Several workers (MultiWorkerMirroredStrategy, the trainer's strategy passed to `start`): the
chief alone builds, snapshots, starts builders, publishes and prunes; after every step it
sends the step of the version it uses to the other workers (`distribute.chief_value`, an
all-reduce), which load that version, so every worker swaps to the same index at the same step.
"""
import abc
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import uuid
from typing import List, Optional, Sequence

import tensorflow as tf
from absl import logging

from realm_tf import errors
from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.training import distribute


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
  """

  def __init__(self, index_root: str, every_n_steps: int, store: Corpus,
               special_ids: Sequence[int], kind: str = "scann", block_length: int = 288,
               compute_dtype: str = "float32", jit_compile: bool = False,
               keep_versions: int = 3,
               scann: index_builder.ScannSettings = index_builder.ScannSettings()):
    index_builder.check_kind(kind)
    if keep_versions < 1:
      raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
    self.keep_versions = keep_versions
    self.index_root, self.every_n_steps, self.store = index_root, max(1, every_n_steps), store
    self.special_ids, self.kind, self.block_length = tuple(special_ids), kind, block_length
    self.compute_dtype, self.jit_compile = compute_dtype, jit_compile
    self.scann = scann
    self.index: Optional[MipsIndex] = None
    self.version = ""
    self.snapshot_step = 0
    self.swaps = 0
    self._doc_tower: Optional[DocTower] = None
    self._strategy = tf.distribute.get_strategy()
    self._chief = True

  def _load(self, version: str) -> None:
    index = index_publisher.load_version(self.index_root, version, verify_checksums=False)
    where = os.path.join(self.index_root, version)
    built_from = index_publisher.read_metadata(self.index_root, version).get(
        "corpus_fingerprint", self.store.fingerprint)
    if index.num_docs != len(self.store) or built_from != self.store.fingerprint:
      raise errors.InputError(errors.describe(
          where, f"index built from another corpus: {index.num_docs} blocks, corpus "
          f"fingerprint {str(built_from)[:12]}; the corpus has {len(self.store)} blocks, "
          f"fingerprint {self.store.fingerprint[:12]}", "Pass the --corpus it was built from, "
          "or a new --index_root for this corpus"))
    self.index, self.version = index, version
    self.snapshot_step = index_publisher.step_of_version(version) or 0
    self.swaps += 1
    logging.info("Using index %s (snapshot step %d)", version, self.snapshot_step)
    if self._chief:
      self._prune()

  def _prune(self) -> List[str]:
    """Deletes all but the `keep_versions` newest index versions (never the one in use);
    returns the versions left, oldest first."""
    versions = index_publisher.list_versions(self.index_root)
    if self.version not in versions[-self.keep_versions:]:
      return versions  # a resumed run on an older version: keep everything until it swaps
    removed = index_publisher.keep_last(self.index_root, self.keep_versions)
    if removed:
      logging.info("Removed index versions %s (keeping the %d newest)", removed,
                   self.keep_versions)
    return [v for v in versions if v not in removed]

  def _build_now(self, step: int, retriever: Retriever) -> None:
    if self._doc_tower is None or self._doc_tower.retriever is not retriever:
      self._doc_tower = DocTower(retriever, *self.special_ids, block_length=self.block_length,
                                 compute_dtype=self.compute_dtype, jit_compile=self.jit_compile)
    embeddings = embed_blocks(self._doc_tower, self.store.title_ids, self.store.body_ids)
    version = index_publisher.version_for_step(step)
    index_publisher.publish(index_builder.build_index(embeddings, self.kind, self.scann),
                            self.index_root, version,
                            {"snapshot_step": step, "corpus_fingerprint": self.store.fingerprint})
    self._load(version)

  def start(self, step: int, retriever: Retriever, resume_version: str = "",
            strategy=None) -> None:
    """Loads the index a resumed run used (or the published one, else the newest complete),
    building one if none exists; `strategy` is the trainer's (the chief of several workers
    does all of this, the others load the chief's choice).

    Versions after `step` (published by a killed run after its last checkpoint) are deleted:
    this run builds them again from its own weights. `LATEST` is read as everywhere, by
    `index_publisher.latest_version` (ValueError / FileNotFoundError naming the fix).
    """
    self._strategy = strategy or tf.distribute.get_strategy()
    self._chief = distribute.is_chief(self._strategy)
    if self._chief:
      self._start(step, retriever, resume_version)
    self._follow_chief()

  def _start(self, step: int, retriever: Retriever, resume_version: str) -> None:
    index_publisher.cleanup_partial(self.index_root)
    discarded = index_publisher.discard_after(self.index_root, step)
    if discarded:
      logging.info("Discarded indexes %s: built after the resumed step %d", discarded, step)
    versions = index_publisher.list_versions(self.index_root)
    if resume_version and resume_version in versions:
      self._load(resume_version)
    elif versions:
      self._load(index_publisher.latest_version(self.index_root) or versions[-1])
    else:
      self._build_now(step, retriever)

  def maybe_refresh(self, step: int, retriever: Retriever) -> bool:
    """Called after each step (on every worker); returns True when a new index was swapped in.

    Raises:
      IndexBuilderError: the last `max_builder_failures` builds failed (on the chief, or
        reported by it).
    """
    swapped = False
    if self._chief:
      try:
        swapped = self._refresh(step, retriever)
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
          "step-XXXXXXXX, the only names the chief can send the other workers",
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
  def _refresh(self, step: int, retriever: Retriever) -> bool:
    """The chief's part of `maybe_refresh`."""

  def close(self) -> None:
    """Releases background resources."""


class SynchronousRefresher(IndexRefresher):
  """Rebuilds in the trainer's process every N steps, blocking."""

  def _refresh(self, step: int, retriever: Retriever) -> bool:
    if step % self.every_n_steps:
      return False
    self._build_now(step, retriever)
    return True


class AsynchronousRefresher(IndexRefresher):
  """Snapshots the doc embedder every N steps; a builder process publishes indexes.

  Args:
    corpus_dir: the block shards the builder reads.
    snapshot_root: where doc-embedder snapshots are exported.
    builder_args: extra command-line arguments for the builder (e.g. Beam runner flags to run
      it on Dataflow or Flink in cluster mode).
    max_builder_failures: consecutive failed builds after which `maybe_refresh` raises
      `IndexBuilderError`.
  """

  def __init__(self, index_root: str, every_n_steps: int, store: Corpus,
               special_ids: Sequence[int], corpus_dir: str, snapshot_root: str,
               kind: str = "scann", block_length: int = 288,
               builder_args: Sequence[str] = (), compute_dtype: str = "float32",
               jit_compile: bool = False, max_builder_failures: int = 2,
               keep_versions: int = 3,
               scann: index_builder.ScannSettings = index_builder.ScannSettings()):
    super().__init__(index_root, every_n_steps, store, special_ids, kind, block_length,
                     compute_dtype, jit_compile, keep_versions, scann)
    if max_builder_failures < 1:
      raise ValueError(f"max_builder_failures must be >= 1, got {max_builder_failures}")
    self.corpus_dir, self.snapshot_root = corpus_dir, snapshot_root
    self.builder_args = list(builder_args)
    self.max_builder_failures = max_builder_failures
    self._builder: Optional[subprocess.Popen] = None
    self._builder_command: List[str] = []
    self._builder_log = ""
    self._builder_version = ""
    self._pending: Optional[str] = None
    self._failures: List[str] = []  # reports of the consecutive failed builds

  def _snapshot(self, step: int, retriever: Retriever) -> str:
    final = os.path.join(self.snapshot_root, index_publisher.version_for_step(step))
    tmp = f"{final}.tmp-{uuid.uuid4().hex}"
    export_doc_embedder(retriever, tmp, *self.special_ids, block_length=self.block_length,
                        snapshot_step=step, compute_dtype=self.compute_dtype,
                        jit_compile=self.jit_compile)
    if tf.io.gfile.exists(final):
      tf.io.gfile.rmtree(final)
    tf.io.gfile.rename(tmp, final)
    return final

  def _prune(self) -> List[str]:
    """Also deletes the snapshots (and builder logs) older than the oldest kept version,
    except those a builder is building or will build."""
    versions = super()._prune()
    if not versions or not tf.io.gfile.isdir(self.snapshot_root):
      return versions
    oldest = index_publisher.step_of_version(versions[0]) or 0
    busy = {self._builder_version if self._builder is not None else "",
            os.path.basename((self._pending or "").rstrip("/"))}
    for name in tf.io.gfile.listdir(self.snapshot_root):
      name = name.rstrip("/")
      step = index_publisher.step_of_version(name)
      if step is None or step >= oldest or name in busy:
        continue
      tf.io.gfile.rmtree(os.path.join(self.snapshot_root, name))
      log = self._log_path(name)
      if os.path.exists(log):
        os.remove(log)
    return versions

  def builder_command(self, snapshot_dir: str) -> List[str]:
    return [sys.executable, "-m", "pipelines.build_index", f"--corpus={self.corpus_dir}",
            f"--embedder_dir={snapshot_dir}", f"--index_root={self.index_root}",
            f"--index_kind={self.kind}"] + self.scann.flag_args() + self.builder_args

  def _log_path(self, version: str) -> str:
    directory = self.snapshot_root
    if "://" in directory:  # the builder writes its output to a local file
      directory = os.path.join(tempfile.gettempdir(), "index-builder-logs")
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"builder-{version}.log")

  def _launch(self, snapshot_dir: str) -> None:
    self._builder_version = os.path.basename(snapshot_dir.rstrip("/"))
    self._builder_command = self.builder_command(snapshot_dir)
    self._builder_log = self._log_path(self._builder_version)
    with open(self._builder_log, "wb") as log:
      self._builder = subprocess.Popen(self._builder_command, stdout=log,
                                       stderr=subprocess.STDOUT)
    logging.info("Index builder started on %s (pid %d), log %s", snapshot_dir,
                 self._builder.pid, self._builder_log)

  def _check_finished_build(self) -> None:
    """Counts the finished build as a success or a failure; logs a failure as an error."""
    code = self._builder.returncode
    version = self._builder_version
    if code == 0 and version in index_publisher.list_versions(self.index_root):
      self._failures = []
      return
    if code < 0:
      what = f"was killed by signal {-code} ({signal.strsignal(-code)})"
    elif code:
      what = f"failed with exit status {code}"
    else:
      what = f"exited with status 0 but published no index {version} in {self.index_root}"
    self._failures.append(
        f"the index builder for {version} {what} (failure {len(self._failures) + 1} in a row, "
        f"at most {self.max_builder_failures}). Last lines of its log {self._builder_log}:\n"
        f"{_tail(self._builder_log)}\nReproduce it with:\n  {shlex.join(self._builder_command)}")
    logging.error("%s", self._failures[-1])

  def _poll_builder(self) -> None:
    if self._builder is None or self._builder.poll() is None:
      return
    self._check_finished_build()
    self._builder = None
    if self._pending and len(self._failures) < self.max_builder_failures:
      pending, self._pending = self._pending, None
      self._launch(pending)

  def _refresh(self, step: int, retriever: Retriever) -> bool:
    """See `IndexRefresher.maybe_refresh`."""
    self._poll_builder()
    n = len(self._failures)
    if n >= self.max_builder_failures:
      raise IndexBuilderError(
          f"stopping: {n} consecutive index build{'s' * (n > 1)} failed, and training would "
          f"go on with the index of step {self.snapshot_step} growing staler. Fix the builder "
          f"(e.g. --builder_args), then resume from the last checkpoint (or allow more "
          f"failures with --max_builder_failures). Last failure: {self._failures[-1]}")
    if step % self.every_n_steps == 0:
      snapshot = self._snapshot(step, retriever)
      if self._builder is None:
        self._launch(snapshot)
      else:
        self._pending = snapshot  # the builder is busy: it takes the newest snapshot next
    newest = index_publisher.latest_version(self.index_root)
    if newest and newest > self.version:
      self._load(newest)
      return True
    return False

  def wait(self, timeout: Optional[float] = None) -> None:
    """Waits for the running (and pending) builds; for tests and the end of a run."""
    while self._builder is not None:
      self._builder.wait(timeout)
      self._poll_builder()

  def close(self) -> None:
    """Terminates a running builder, and reports one that failed since the last check."""
    if self._builder is not None:
      if self._builder.poll() is None:
        self._builder.terminate()
        self._builder.wait(30)
        logging.info("Index builder for %s terminated (log %s)", self._builder_version,
                     self._builder_log)
      else:
        self._check_finished_build()
    self._builder = None


def _tail(path: str, lines: int = 20, max_bytes: int = 8192) -> str:
  """The last `lines` lines of file `path` (at most its last `max_bytes` bytes)."""
  with open(path, "rb") as f:
    f.seek(max(0, os.path.getsize(path) - max_bytes))
    return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
