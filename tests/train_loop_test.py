"""TrainLoop's step records: buffered to metrics.jsonl before each checkpoint; the progress bar's
windowed means and current gauges."""
import json
import os

import numpy as np
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


def _adamw_run(model_dir, num_steps):
  """A loop whose tf.function step applies AdamW to two variables, its slots made before the
  first step: (trained variables, the step function, the optimizer)."""
  from realm_tf.training.optimizer import OptimizerConfig  # pylint: disable=g-import-not-at-top
  from realm_tf.training.optimizer import apply_gradients  # pylint: disable=g-import-not-at-top
  from realm_tf.training.optimizer import create_optimizer  # pylint: disable=g-import-not-at-top
  from realm_tf.training.optimizer import create_slots  # pylint: disable=g-import-not-at-top
  weights = [tf.Variable([1.0, -2.0], name="w"), tf.Variable(0.5, name="b")]
  optimizer = create_optimizer(OptimizerConfig(learning_rate=0.1, num_train_steps=6,
                                               warmup_steps=0))

  @tf.function
  def step(scale):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.square(weights[0] * scale - weights[1]))
    apply_gradients(optimizer, zip(tape.gradient(loss, weights), weights))
    return {"loss": loss}

  loop = train_loop.TrainLoop(str(model_dir), {"w": weights[0], "b": weights[1],
                                               "optimizer": optimizer},
                              num_steps, checkpoint_every=3, verbose=False,
                              before_first_step=lambda: create_slots(optimizer, weights))
  loop.run(lambda i: step(tf.constant(1.0 + i)))
  return weights, step, optimizer


def test_slots_made_before_the_first_step_trace_it_once_and_resume_exactly(tmp_path):
  weights, step, optimizer = _adamw_run(tmp_path / "whole", 6)
  assert step.experimental_get_tracing_count() == 1  # twice when apply_gradients makes slots
  assert len(optimizer.variables()) == 1 + 2 * 2  # iterations, then m and v of each
  _adamw_run(tmp_path / "cut", 3)
  resumed, _, resumed_optimizer = _adamw_run(tmp_path / "cut", 6)  # slots from the checkpoint
  for got, want in zip(resumed, weights):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
  # A restore makes the slots it reads itself, outside the optimizer's name scope.
  values = lambda o: {v.name.removeprefix("AdamWeightDecay/"): v.numpy() for v in o.variables()}
  got, want = values(resumed_optimizer), values(optimizer)
  assert sorted(got) == sorted(want) and int(got["iter:0"]) == 6
  for name, value in want.items():
    np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=name)
