"""The step loop shared by every trainer: resume, checkpoint, summaries, progress with ETA.

Metrics go to TensorBoard every `summary_every` steps and to `model_dir/metrics.jsonl` every
step (a JSON object a line; `training.plots` draws the retrieval-utility curve). The lines are
buffered and appended just before each checkpoint, since on `gs://` an append re-uploads the
file; a resumed run thus has every step's record (a step logged again keeps its last record).
An `Evaluation` (e.g. `recall_monitor.RecallMonitor`) runs before the first step and every
`every_n_steps`: `model_dir/eval.jsonl`, TensorBoard `eval/<name>`, the best checkpoint so far
(the start included) in `model_dir/best/`, a warning for a stage that ends below its start.

A resume checks the run's structural configuration (`run_config`) and that every variable was
restored (`checkpoints.tf2_checkpoint`). `CheckpointManager` writes each checkpoint under a new
name before its state file, so that a `kill -9` at any moment leaves the previous one intact.
With several workers only the chief's files are kept, and all resume from the chief's.
"""
import dataclasses
import json
import os
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf
from absl import logging

from realm_tf import distribute
from realm_tf import errors
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.keras import keras
from realm_tf.training import run_config as run_configs


BEST_DIR = "best"
EVAL_LOG = "eval.jsonl"
PROGRESS_WINDOW = 20
_WINDOWED = ("loss", "accuracy", "retrieval_utility")
_GAUGES = ("index_staleness",)


def read_step_records(path: str) -> List[Dict[str, float]]:
  """A `metrics.jsonl` / `eval.jsonl` the loop wrote, one record per step in step order (a
  step logged again after a resumption keeps its last record).

  Raises:
    FileNotFoundError / InputError: `path` is missing or a directory; MalformedRecordError: a
      line is not a JSON record with a step (the message names the file and line).
  """
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(errors.describe(path, "no such file",
                                            "Pass the metrics.jsonl or eval.jsonl a run wrote"))
  if tf.io.gfile.isdir(path):
    raise errors.InputError(errors.describe(path, "is a directory, not a metrics.jsonl",
                                            f"Pass {os.path.join(path, 'metrics.jsonl')}"))
  by_step = {}
  with tf.io.gfile.GFile(path, "r") as f:
    for line_number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
        by_step[int(record["step"])] = record
      except (ValueError, TypeError, KeyError) as e:
        raise errors.MalformedRecordError(path, line_number, f"not a JSON record with a step "
                                          f"({type(e).__name__}: {errors.one_line(e)})") from e
  return [by_step[step] for step in sorted(by_step)]


def _is_optimizer(item) -> bool:
  return isinstance(item, (keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer))


@dataclasses.dataclass
class Evaluation:
  """`fn()` -> metrics, run every `every_n_steps` steps, at the last step and (`at_start`)
  before the first step of a run; `metric` (larger is better) picks the best checkpoint."""
  fn: Callable[[], Dict[str, float]]
  every_n_steps: int
  metric: str
  at_start: bool = True


class TrainLoop:
  """Runs `step_fn(step)` from the restored step to `num_steps`.

  Args:
    model_dir: checkpoints in `model_dir/<checkpoint_subdir>`, TensorBoard events in
      `model_dir/train`.
    checkpoint_items: objects to save; the loop adds its `step` variable to them.
    num_steps: total steps of the run (resumed runs finish the same total).
    checkpoint_every: steps between checkpoints (and one at the end).
    summary_every: steps between TensorBoard scalars.
    max_to_keep: checkpoints kept.
    run_config: the run's structural configuration (`run_config.retriever_structure` ...),
      saved with the first checkpoint and compared on resume.
    strategy: the `tf.distribute` strategy the step runs under (default: the current one).
    checkpoint_subdir: the checkpoints' directory under `model_dir` ("": `model_dir` itself).
    best_items: what `best/` checkpoints hold (default: `checkpoint_items`), plus `step`.
    after_save: called with the step after each checkpoint is written.
    after_best: called with the step and its metrics after `best/` is written.
    before_first_step: called once a run has restored its checkpoint, before its first step
      (e.g. `optimizer.create_slots`).
  """

  def __init__(self, model_dir: str, checkpoint_items: Dict[str, object], num_steps: int,
               checkpoint_every: int = 100, summary_every: int = 1, max_to_keep: int = 3,
               verbose: bool = True, run_config: Optional[Dict[str, object]] = None,
               strategy=None, checkpoint_subdir: str = "checkpoints",
               best_items: Optional[Dict[str, object]] = None,
               after_save: Optional[Callable[[int], None]] = None,
               after_best: Optional[Callable[[int, Dict[str, float]], None]] = None,
               before_first_step: Optional[Callable[[], None]] = None):
    self.model_dir = model_dir
    self._before_first_step = before_first_step
    self.strategy = strategy or tf.distribute.get_strategy()
    output = distribute.output_dir(self.strategy, model_dir)  # model_dir on the chief
    self.output_dir = output  # where this worker writes
    self.run_config = run_config
    self._save_run_config = run_config is not None
    self.num_steps = num_steps
    self.checkpoint_every = max(1, checkpoint_every)
    self.summary_every = max(1, summary_every)
    self.verbose = verbose
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self._items = checkpoint_items
    self.checkpoint = tf.train.Checkpoint(step=self.step, **checkpoint_items)

    def under(directory: str) -> str:
      return os.path.join(directory, checkpoint_subdir) if checkpoint_subdir else directory

    self.checkpoint_dir = under(model_dir)  # read by every worker
    self.manager = tf.train.CheckpointManager(self.checkpoint, under(output),
                                              max_to_keep=max_to_keep)
    self.writer = tf.summary.create_file_writer(os.path.join(output, "train"))
    self.metrics_path = os.path.join(output, "metrics.jsonl")
    self.eval_path = os.path.join(output, EVAL_LOG)
    best = self.checkpoint if best_items is None else tf.train.Checkpoint(step=self.step,
                                                                          **best_items)
    self.best_manager = tf.train.CheckpointManager(best, os.path.join(output, BEST_DIR),
                                                   max_to_keep=1)
    self._after_save, self._after_best = after_save, after_best
    self.history = []
    self._unwritten: List[Dict[str, float]] = []
    self.ended_below_start = False

  def evaluations(self) -> List[Dict[str, float]]:
    """The evaluations recorded in `eval.jsonl` (all runs of this model_dir), in step order."""
    if not tf.io.gfile.exists(self.eval_path):
      return []
    with tf.io.gfile.GFile(self.eval_path, "r") as f:
      return [json.loads(line) for line in f if line.strip()]

  def _evaluate(self, evaluation: Evaluation, step: int) -> Dict[str, float]:
    started = time.perf_counter()
    result = {k: float(v) for k, v in evaluation.fn().items()}
    if evaluation.metric not in result:
      raise KeyError(f"evaluation returned {sorted(result)}, not the metric "
                     f"{evaluation.metric!r} that picks the best checkpoint")
    earlier = [e for e in self.evaluations() if e["step"] < step]
    previous = [e[evaluation.metric] for e in earlier]
    lines = earlier + [dict(result, step=step, eval_time_s=time.perf_counter() - started)]
    with tf.io.gfile.GFile(self.eval_path, "w") as f:  # a resumed run replaces lost futures
      f.write("".join(json.dumps(e) + "\n" for e in lines))
    with self.writer.as_default(step=step):
      for name, value in result.items():
        tf.summary.scalar(f"eval/{name}", value)
    if not previous or result[evaluation.metric] > max(previous):
      self.save_best(result)
    logging.info("Step %d: %s", step, ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    return result

  def save_best(self, metrics: Dict[str, float]) -> None:
    """Writes the current weights to `best/` (e.g. the last step of a run without
    evaluation); `metrics` go to `after_best`."""
    step = int(self.step.numpy())
    self.best_manager.save(checkpoint_number=step)
    if self._after_best:
      self._after_best(step, metrics)

  def best(self) -> Optional[Dict[str, float]]:
    """The evaluation of the checkpoint in `best/`, or None."""
    latest = self.best_manager.latest_checkpoint
    if not latest:
      return None
    step = int(latest.rsplit("-", 1)[-1])
    return next((e for e in self.evaluations() if e["step"] == step), None)

  def restore_best(self) -> Optional[int]:
    """Loads the best checkpoint's weights (e.g. before exporting); returns its step."""
    latest = self.best_manager.latest_checkpoint
    if not latest:
      return None
    # The model alone is verified: a best checkpoint may predate the optimizer's slots.
    models = {k: v for k, v in self._items.items() if not _is_optimizer(v)}
    tf2_checkpoint.restore_checked(tf.train.Checkpoint(step=self.step, **models), latest,
                                read=True)
    return int(latest.rsplit("-", 1)[-1])

  def restore(self) -> int:
    """Restores the latest checkpoint, if any; returns the step to continue from.

    Raises:
      errors.InputError: the run's configuration differs from the checkpoints', or a
        checkpoint leaves a model variable unrestored.
    """
    latest = tf.train.latest_checkpoint(self.checkpoint_dir)
    if latest:
      if self.run_config is not None:
        run_configs.check(self.checkpoint_dir, self.run_config, self.model_dir)
      self._save_run_config = False
      tf2_checkpoint.restore_checked(self.checkpoint, latest)
      logging.info("Resumed from %s at step %d", latest, int(self.step.numpy()))
    return int(self.step.numpy())

  def save(self) -> str:
    if self._save_run_config:  # before the first checkpoint: never a checkpoint without it
      run_configs.save(self.manager.directory, self.run_config)
      self._save_run_config = False
    self._write_metrics()  # first: a kill after the checkpoint must not lose the records
    path = self.manager.save(checkpoint_number=int(self.step.numpy()))
    if self._after_save:
      self._after_save(int(self.step.numpy()))
    return path

  def _learning_rates(self) -> Dict[str, float]:
    """`learning_rate` of the checkpointed optimizer (`learning_rate/<name>` with several)."""
    optimizers = {k: v for k, v in self._items.items() if _is_optimizer(v)}
    rates = {}
    for name, optimizer in optimizers.items():
      rate = optimizer.learning_rate
      rate = rate(optimizer.iterations) if callable(rate) else rate
      rates["learning_rate" if len(optimizers) == 1 else f"learning_rate/{name}"] = float(rate)
    return rates

  def _write_metrics(self) -> None:
    """Appends the buffered step records to `metrics.jsonl`."""
    if self._unwritten:
      with tf.io.gfile.GFile(self.metrics_path, "a") as f:
        f.write("".join(json.dumps(record) + "\n" for record in self._unwritten))
      self._unwritten = []

  def _progress_values(self, metrics: Dict[str, float]):
    """(name, value) pairs for the bar: gauges now, the rest averaged over the window."""
    window = self.history[-PROGRESS_WINDOW:]
    values = [(k, sum(r[k] for r in window if k in r) / sum(k in r for r in window))
              for k in _WINDOWED if k in metrics]
    return values + [(k, metrics[k]) for k in _GAUGES if k in metrics]

  def run(self, step_fn: Callable[[int], Dict[str, float]],
          after_step: Optional[Callable[[int], None]] = None,
          evaluation: Optional[Evaluation] = None) -> Dict[str, float]:
    """Trains to `num_steps`; returns the last step's metrics.

    Raises:
      distribute.WorkerLostError: another worker of a multi-worker job stopped.
    """
    with distribute.reporting_lost_workers(self.strategy, self.model_dir, self.step):
      return self._run(step_fn, after_step, evaluation)

  def _run(self, step_fn, after_step, evaluation) -> Dict[str, float]:
    start_step = self.restore()
    if self._before_first_step and start_step < self.num_steps:
      self._before_first_step()
    if evaluation and evaluation.at_start and start_step == 0 and not any(
        e["step"] == 0 for e in self.evaluations()):
      self._evaluate(evaluation, 0)
    bar = keras.utils.Progbar(self.num_steps, verbose=1 if self.verbose else 0,
                              stateful_metrics=_WINDOWED + _GAUGES)
    bar.update(start_step)
    metrics = {}
    for step in range(start_step, self.num_steps):
      rates = self._learning_rates()  # the rates this step applies
      started = time.perf_counter()
      metrics = {k: float(v) for k, v in step_fn(step).items()}
      metrics["step_time_s"] = time.perf_counter() - started
      metrics.update(rates)
      self.step.assign(step + 1)
      self.history.append(dict(metrics, step=step + 1))
      self._unwritten.append(self.history[-1])
      if (step + 1) % self.summary_every == 0:
        with self.writer.as_default(step=step + 1):
          for name, value in metrics.items():
            tf.summary.scalar(name, value)
      if after_step:
        after_step(step + 1)
      if evaluation and ((step + 1) % evaluation.every_n_steps == 0 or
                         step + 1 == self.num_steps):
        self._evaluate(evaluation, step + 1)
      if (step + 1) % self.checkpoint_every == 0 or step + 1 == self.num_steps:
        self.save()
      bar.update(step + 1, values=self._progress_values(metrics))
    self._write_metrics()
    self.writer.flush()
    if evaluation:
      self._check_progress(evaluation.metric)
    return metrics

  def _check_progress(self, metric: str) -> None:
    evaluations = self.evaluations()
    if len(evaluations) < 2 or evaluations[0]["step"] != 0:
      return
    start, end = evaluations[0][metric], evaluations[-1][metric]
    self.ended_below_start = end < start
    if self.ended_below_start:
      best = self.best() or {}
      logging.warning("%s\n%s ENDED BELOW ITS START: %s %.4f at step 0, %.4f at step %d; the "
                      "best checkpoint (step %s, %.4f) is in %s\n%s", "!" * 72,
                      self.model_dir, metric, start, end, evaluations[-1]["step"],
                      best.get("step"), best.get(metric, float("nan")),
                      os.path.join(self.model_dir, BEST_DIR), "!" * 72)
