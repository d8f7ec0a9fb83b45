"""Serializable activations used by the BERT towers."""
import tensorflow as tf

from realm_tf.keras import keras


@keras.utils.register_keras_serializable(package="realm_tf")
def gelu_approximate(x):
  """GELU with the tanh approximation, as TF1 BERT and REALM use ("gelu_new" in HF)."""
  return tf.nn.gelu(x, approximate=True)


@keras.utils.register_keras_serializable(package="realm_tf")
def gelu_exact(x):
  """GELU with the exact erf form, as HF BERT checkpoints use ("gelu" in HF)."""
  return tf.nn.gelu(x, approximate=False)


ACTIVATIONS = {"gelu_approximate": gelu_approximate, "gelu": gelu_exact}


def get_activation(name: str):
  """Returns the activation function for `name` ("gelu" or "gelu_approximate")."""
  if name not in ACTIVATIONS:
    raise ValueError(f"Unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}")
  return ACTIVATIONS[name]
