"""The step loop shared by every trainer: resume, checkpoint, summaries, progress with ETA.

Each step's metrics also go to `model_dir/metrics.jsonl` (one JSON object per line, with
"step"), which `realm_tf.training.plots` turns into the retrieval-utility curve.

Checkpoints hold whatever the trainer puts in its `tf.train.Checkpoint` plus the step counter;
`CheckpointManager` writes each checkpoint under a new name and only then updates its state
file, so a `kill -9` at any moment leaves the previous checkpoint intact and the next run
resumes from it.
"""
import json
import os
import time
from typing import Callable, Dict, Optional

import tensorflow as tf
from absl import logging

from realm_tf.keras import keras


class TrainLoop:
  """Runs `step_fn(step)` from the restored step to `num_steps`.

  Args:
    model_dir: checkpoints in `model_dir/checkpoints`, TensorBoard events in `model_dir/train`.
    checkpoint: objects to save; the loop adds its `step` variable to it.
    num_steps: total steps of the run (resumed runs finish the same total).
    checkpoint_every: steps between checkpoints (and one at the end).
    summary_every: steps between TensorBoard scalars.
    max_to_keep: checkpoints kept.
  """

  def __init__(self, model_dir: str, checkpoint_items: Dict[str, object], num_steps: int,
               checkpoint_every: int = 100, summary_every: int = 1, max_to_keep: int = 3,
               verbose: bool = True):
    self.model_dir = model_dir
    self.num_steps = num_steps
    self.checkpoint_every = max(1, checkpoint_every)
    self.summary_every = max(1, summary_every)
    self.verbose = verbose
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.checkpoint = tf.train.Checkpoint(step=self.step, **checkpoint_items)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, os.path.join(model_dir, "checkpoints"), max_to_keep=max_to_keep)
    self.writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
    self.metrics_path = os.path.join(model_dir, "metrics.jsonl")
    self.history = []

  def restore(self) -> int:
    """Restores the latest checkpoint, if any; returns the step to continue from."""
    latest = self.manager.latest_checkpoint
    if latest:
      self.checkpoint.restore(latest).expect_partial()
      logging.info("Resumed from %s at step %d", latest, int(self.step.numpy()))
    return int(self.step.numpy())

  def save(self) -> str:
    return self.manager.save(checkpoint_number=int(self.step.numpy()))

  def run(self, step_fn: Callable[[int], Dict[str, float]],
          after_step: Optional[Callable[[int], None]] = None) -> Dict[str, float]:
    """Trains to `num_steps`; returns the last step's metrics."""
    start_step = self.restore()
    bar = keras.utils.Progbar(self.num_steps, verbose=1 if self.verbose else 0,
                              stateful_metrics=None)
    bar.update(start_step)
    metrics = {}
    for step in range(start_step, self.num_steps):
      started = time.perf_counter()
      metrics = {k: float(v) for k, v in step_fn(step).items()}
      metrics["step_time_s"] = time.perf_counter() - started
      self.step.assign(step + 1)
      self.history.append(dict(metrics, step=step + 1))
      with tf.io.gfile.GFile(self.metrics_path, "a") as f:
        f.write(json.dumps(self.history[-1]) + "\n")
      if (step + 1) % self.summary_every == 0:
        with self.writer.as_default(step=step + 1):
          for name, value in metrics.items():
            tf.summary.scalar(name, value)
      if after_step:
        after_step(step + 1)
      if (step + 1) % self.checkpoint_every == 0 or step + 1 == self.num_steps:
        self.save()
      bar.update(step + 1, values=[(k, v) for k, v in metrics.items()
                                   if k in ("loss", "retrieval_utility", "index_staleness")])
    self.writer.flush()
    return metrics
