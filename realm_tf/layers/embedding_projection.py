"""Projection of a BERT pooled output to the retrieval embedding space."""
import tensorflow as tf

from realm_tf.keras import keras


@keras.utils.register_keras_serializable(package="realm_tf")
class EmbeddingProjection(keras.layers.Layer):
  """Dense(projection_size) -> LayerNorm, REALM's `Embed_input` / `Embed_doc` head.

  Args:
    projection_size: output dimension D (REALM: 128).
    layer_norm_epsilon: LayerNorm epsilon (REALM: 1e-12).
    initializer_range: stddev of the truncated-normal kernel initializer.
  """

  def __init__(self, projection_size: int = 128, layer_norm_epsilon: float = 1e-12,
               initializer_range: float = 0.02, **kwargs):
    super().__init__(**kwargs)
    self.projection_size = projection_size
    self.layer_norm_epsilon = layer_norm_epsilon
    self.initializer_range = initializer_range
    self.dense = keras.layers.Dense(
        projection_size,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="dense")
    self.layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_epsilon, dtype=tf.float32, name="LayerNorm")

  def call(self, pooled_output):
    """[B, H] pooled output -> [B, D] float32 embedding."""
    return self.layer_norm(self.dense(pooled_output))

  def get_config(self):
    return dict(super().get_config(), projection_size=self.projection_size,
                layer_norm_epsilon=self.layer_norm_epsilon,
                initializer_range=self.initializer_range)
