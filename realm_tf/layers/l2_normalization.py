"""Unit-length embeddings, the sentence-transformers retrieval head."""
import tensorflow as tf

from realm_tf.keras import keras


@keras.utils.register_keras_serializable(package="realm_tf")
class L2Normalization(keras.layers.Layer):
  """x -> x / ||x||₂ in float32; no weights.

  The head all-MiniLM-L6-v2 was trained with (mean pooling -> Normalize): with it, a retriever
  built from that checkpoint scores blocks by the cosine similarity the checkpoint learned.

  Args:
    epsilon: lower bound of the squared norm (an all-zero row stays zero).
  """

  def __init__(self, epsilon: float = 1e-12, **kwargs):
    super().__init__(**kwargs)
    self.epsilon = epsilon

  def call(self, inputs):
    """[B, H] -> [B, H] float32 rows of unit length."""
    return tf.math.l2_normalize(tf.cast(inputs, tf.float32), axis=-1, epsilon=self.epsilon)

  def get_config(self):
    return dict(super().get_config(), epsilon=self.epsilon)
