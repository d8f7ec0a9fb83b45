"""`ReusableModule.save`: every exported function traced once, signatures named by their
specs, `__call__` kept for `training` True and False."""
import numpy as np
import tensorflow as tf

from realm_tf.signatures.reusable import ReusableModule

VALUES = tf.TensorSpec([None], tf.float32, name="values")
PAIRS = {n: tf.TensorSpec([None], tf.float32, name=n) for n in ("left", "right")}
TRACES = []  # one entry per Python execution (trace) of a function body


class _Module(ReusableModule):

  def __init__(self):
    self.weight = tf.Variable(3.0)
    super().__init__([self.weight])

  @tf.function
  def __call__(self, inputs, training=False):
    TRACES.append(("__call__", isinstance(inputs, dict), training))
    if isinstance(inputs, dict):
      inputs = inputs["left"] + inputs["right"]
    scale = 2.0 if training else 1.0
    return {"out": inputs * self.weight * scale}

  @tf.function(input_signature=[VALUES])
  def negate(self, values):
    TRACES.append(("negate",))
    return {"negated": -values * self.weight}


def test_save_traces_each_function_once_and_keeps_every_signature(tmp_path):
  TRACES.clear()
  module = _Module()
  module.save(str(tmp_path), [VALUES, dict(PAIRS)], {
      "serving_default": lambda: module.__call__.get_concrete_function(VALUES, training=False),
      "pairs": lambda: module.__call__.get_concrete_function(dict(PAIRS), training=False),
      "negate": module.negate.get_concrete_function})
  assert sorted(TRACES, key=str) == sorted(
      [("__call__", d, t) for d in (False, True) for t in (False, True)] + [("negate",)], key=str)

  loaded = tf.saved_model.load(str(tmp_path))
  values = tf.constant([1.0, 2.0])
  serving = loaded.signatures["serving_default"]
  assert set(serving.structured_input_signature[1]) == {"values"}
  np.testing.assert_allclose(serving(values=values)["out"], [3.0, 6.0])
  pairs = loaded.signatures["pairs"]
  assert set(pairs.structured_input_signature[1]) == {"left", "right"}
  np.testing.assert_allclose(pairs(left=values, right=values)["out"], [6.0, 12.0])
  np.testing.assert_allclose(loaded.signatures["negate"](values=values)["negated"], [-3.0, -6.0])
  np.testing.assert_allclose(loaded(values, training=True)["out"], [6.0, 12.0])
  np.testing.assert_allclose(loaded({"left": values, "right": values})["out"], [6.0, 12.0])
  assert [v.numpy() for v in loaded.trainable_variables] == [3.0]
