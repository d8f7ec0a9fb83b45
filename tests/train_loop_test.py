"""TrainLoop's step records: buffered to metrics.jsonl before each checkpoint; the progress bar's
windowed means and current gauges."""
import json
import os

import pytest
import tensorflow as tf

from realm_tf.training import train_loop


def _loop(model_dir, num_steps, checkpoint_every):
  weight = tf.Variable(0.0)
  return train_loop.TrainLoop(str(model_dir), {"weight": weight}, num_steps,
                              checkpoint_every=checkpoint_every, verbose=False)


def _lines(model_dir):
  path = os.path.join(model_dir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line)["step"] for line in f]


def test_metrics_are_written_at_checkpoints_not_every_step(tmp_path):
  loop = _loop(tmp_path, 7, checkpoint_every=3)
  seen = []
  loop.run(lambda step: {"loss": float(step)},
           after_step=lambda step: seen.append((step, _lines(tmp_path))))
  # after step 3 the checkpoint has not been written yet (after_step runs before it)
  assert seen[2] == (3, []) and seen[3] == (4, [1, 2, 3])
  assert _lines(tmp_path) == list(range(1, 8))  # the rest at the last checkpoint


def test_progress_shows_windowed_means_and_current_gauges(tmp_path):
  loop = _loop(tmp_path, 1, checkpoint_every=1)
  for step in range(1, 31):
    loop.history.append({"loss": float(step), "index_staleness": float(step % 5), "step": step})
  values = dict(loop._progress_values({"loss": 30.0, "index_staleness": 0.0}))  # pylint: disable=protected-access
  window = range(31 - train_loop.PROGRESS_WINDOW, 31)
  assert values["loss"] == pytest.approx(sum(window) / len(window))
  assert values["index_staleness"] == 0.0


def test_the_optimizers_learning_rate_is_a_step_metric(tmp_path):
  from realm_tf.training.optimizer import OptimizerConfig  # pylint: disable=g-import-not-at-top
  from realm_tf.training.optimizer import create_optimizer  # pylint: disable=g-import-not-at-top
  weight = tf.Variable(1.0)
  optimizer = create_optimizer(OptimizerConfig(learning_rate=1e-3, num_train_steps=4,
                                               warmup_steps=2))

  def step_fn(step):
    with tf.GradientTape() as tape:
      loss = weight * weight
    optimizer.apply_gradients([(tape.gradient(loss, weight), weight)])
    return {"loss": loss}

  loop = train_loop.TrainLoop(str(tmp_path), {"weight": weight, "optimizer": optimizer}, 4,
                              verbose=False)
  loop.run(step_fn)
  rates = [record["learning_rate"] for record in loop.history]
  expected = [float(optimizer.learning_rate(step)) for step in range(4)]  # the step's own rate
  assert rates == pytest.approx(expected) and max(rates) > 0
