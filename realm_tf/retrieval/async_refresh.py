"""The asynchronous index refresh (REALM §3.3): a builder process publishes the indexes.

Every N steps the trainer exports a doc-embedder snapshot (`<snapshot_root>/step-<8-digit
step>`); a builder process (`python -m pipelines.build_index`, or its Beam pipeline on a
cluster) embeds the corpus with it and publishes the index (`mips.index_publisher`); between
steps the trainer swaps in the newest one without pausing. The builder's output goes to
`<snapshot_root>/builder-<version>.log` (an undrained pipe would block a chatty builder); a
failed build is logged at once with its log's end and the command that reproduces it, and
`max_builder_failures` in a row raise `IndexBuilderError`. No snapshot is taken whose build
could not publish before the last step. `max_staleness` bounds the staleness: beyond it the
trainer waits for the running or pending build (docs/decisions.md). Loading, retention,
resumption and several workers are `retrieval.index_refresh`'s.
"""
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Sequence, Set

from absl import logging

from realm_tf import cli
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.mips import index_builder
from realm_tf.mips import index_publisher
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.index_refresh import IndexBuilderError
from realm_tf.retrieval.index_refresh import IndexRefresher
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


class AsynchronousRefresher(IndexRefresher):
  """Snapshots the doc embedder every N steps; a builder process publishes indexes.

  Args:
    corpus_dir: the block shards, or the corpus-form directory, the builder reads.
    snapshot_root: where doc-embedder snapshots are exported.
    tokenizer: the doc tower's (`IndexRefresher`): the snapshots carry it, and the builder
      embeds a corpus without stored wordpieces in its wordpieces (`Corpus.wordpieces`,
      cached in `corpus_dir` before the first build).
    builder_args: extra command-line arguments for the builder (e.g. Beam runner flags to run
      it on Dataflow or Flink in cluster mode).
    max_builder_failures: consecutive failed builds after which `maybe_refresh` raises
      `IndexBuilderError`.
    max_staleness: the most steps the index in use may lag the trainer while a newer build
      is running or pending (module docstring); 0: unbounded.
  """

  def __init__(self, index_root: str, every_n_steps: int, store: Corpus,
               special_ids: Sequence[int], corpus_dir: str, snapshot_root: str,
               kind: str = "scann", block_length: int = BLOCK_LENGTH,
               builder_args: Sequence[str] = (), compute_dtype: str = "float32",
               jit_compile: bool = False, max_builder_failures: int = 2,
               keep_versions: int = 3,
               scann: index_builder.ScannSettings = index_builder.ScannSettings(),
               sharding: index_builder.Sharding = index_builder.Sharding(),
               tokenizer: Optional[WordpieceTokenizer] = None, max_staleness: int = 0):
    super().__init__(index_root, every_n_steps, store, special_ids, kind, block_length,
                     compute_dtype, jit_compile, keep_versions, scann, sharding,
                     snapshot_root, tokenizer=tokenizer)
    if max_builder_failures < 1:
      raise ValueError(f"max_builder_failures must be >= 1, got {max_builder_failures}")
    if max_staleness < 0:
      raise ValueError(f"max_staleness must be >= 0 (0: unbounded), got {max_staleness}")
    self.max_staleness = max_staleness
    self.corpus_dir = corpus_dir
    self.builder_args = list(builder_args)
    self.max_builder_failures = max_builder_failures
    self._builder: Optional[subprocess.Popen] = None
    self._builder_command: List[str] = []
    self._builder_log = ""
    self._builder_version = ""
    self._builder_started = 0  # the step its build started at
    self._build_steps = 0  # steps the last finished build took
    self._step = 0  # the trainer's latest step
    self._pending: Optional[str] = None
    self._failures: List[str] = []  # reports of the consecutive failed builds

  def _busy(self) -> Set[str]:
    """The snapshots a builder is building or will build."""
    return {self._builder_version if self._builder is not None else "",
            os.path.basename((self._pending or "").rstrip("/"))}

  def _remove_snapshot(self, name: str) -> None:
    """Also deletes the snapshot's builder log."""
    super()._remove_snapshot(name)
    log = self._log_path(name)
    if os.path.exists(log):
      os.remove(log)

  def builder_command(self, snapshot_dir: str) -> List[str]:
    return [sys.executable, "-m", "pipelines.build_index", f"--corpus={self.corpus_dir}",
            f"--embedder_dir={snapshot_dir}", f"--index_root={self.index_root}",
            f"--index_kind={self.kind}",
            *cli.index_flag_args(self.scann, self.sharding)] + self.builder_args

  def _log_path(self, version: str) -> str:
    directory = self.snapshot_root
    if "://" in directory:  # the builder writes its output to a local file
      directory = os.path.join(tempfile.gettempdir(), "index-builder-logs")
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"builder-{version}.log")

  def _launch(self, snapshot_dir: str) -> None:
    if self.tokenizer is not None:
      self._wordpieces()  # a corpus without stored ones: tokenized once, here, on disk
    self._builder_version = os.path.basename(snapshot_dir.rstrip("/"))
    self._builder_command = self.builder_command(snapshot_dir)
    self._builder_log = self._log_path(self._builder_version)
    self._builder_started = self._step
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
    self._build_steps = self._step - self._builder_started
    self._builder = None
    if self._pending and len(self._failures) < self.max_builder_failures:
      pending, self._pending = self._pending, None
      self._launch(pending)

  def _publishes_too_late(self, step: int, last_step: Optional[int]) -> bool:
    """Whether a snapshot of `step` would be published only after `last_step` (module
    docstring)."""
    if last_step is None:
      return False
    expected = self._build_steps
    if self._builder is not None:
      expected = max(expected, step - self._builder_started)
    return step + expected >= last_step

  def _raise_if_failing(self) -> None:
    n = len(self._failures)
    if n >= self.max_builder_failures:
      raise IndexBuilderError(
          f"stopping: {n} consecutive index build{'s' * (n > 1)} failed, and training would "
          f"go on with the index of step {self.snapshot_step} growing staler. Fix the builder "
          f"(e.g. --builder_args), then resume from the last checkpoint (or allow more "
          f"failures with --max_builder_failures). Last failure: {self._failures[-1]}")

  def _swap_to_newest(self) -> bool:
    newest = index_publisher.latest_version(self.index_root)
    if newest and newest > self.version:
      self._load(newest)
      return True
    return False

  def _refresh(self, step: int, retriever: Retriever, last_step: Optional[int]) -> bool:
    """See `IndexRefresher.maybe_refresh`."""
    self._step = step
    self.wait_seconds = 0.0
    self._poll_builder()
    self._raise_if_failing()
    if step % self.every_n_steps == 0 and not self._publishes_too_late(step, last_step):
      snapshot = self._snapshot(step, retriever)
      if self._builder is None:
        self._launch(snapshot)
      else:
        self._pending = snapshot  # the builder is busy: it takes the newest snapshot next
    swapped = self._swap_to_newest()
    return self._wait_while_too_stale(step) or swapped

  def _too_stale(self, step: int) -> bool:
    return bool(self.max_staleness) and step - self.snapshot_step > self.max_staleness

  def _wait_while_too_stale(self, step: int) -> bool:
    """Waits for running and pending builds while the index in use is over `max_staleness`
    steps old at `step`, retrying a failed build; returns True when it swapped."""
    if not self._too_stale(step) or self._builder is None:  # a pending build has a running one
      return False
    started, swapped = time.monotonic(), False
    logging.info("Step %d: index %s is %d steps old (at most %d): waiting for the build of "
                 "%s", step, self.version, step - self.snapshot_step, self.max_staleness,
                 self._builder_version)
    while self._too_stale(step) and self._builder is not None:
      failed = self._builder_version
      self._builder.wait()
      self._poll_builder()
      self._raise_if_failing()
      if self._failures and self._builder is None:
        self._launch(os.path.join(self.snapshot_root, failed))  # retried: nothing else runs
      swapped = self._swap_to_newest() or swapped
    self.wait_seconds = time.monotonic() - started
    logging.info("Step %d: waited %.1f s for index %s (%d steps old)", step, self.wait_seconds,
                 self.version, step - self.snapshot_step)
    return swapped

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
