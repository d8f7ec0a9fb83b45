"""The classification head of retrieval-augmented classification: the reader's [CLS] vector ->
label logits, p(y | z, x) = softmax(W h_[CLS] + b).

Shapes: [N, L, H] reader sequence output (N = texts x blocks read) -> [N, C] float32 logits.
It reads the sequence output, not BERT's pooler: the reader's pooler is never trained by
REALM pre-training (its MLM head reads the token vectors), so its weights would be BERT's or
random, and a Dense over h_[CLS] is what the MLM-trained encoder gives directly.
"""
import tensorflow as tf

from realm_tf.keras import keras


@keras.utils.register_keras_serializable(package="realm_tf")
class ClassificationHead(keras.layers.Layer):
  """h_[CLS] -> dropout -> Dense(`num_labels`), logits in float32.

  Args:
    num_labels: C.
    dropout_rate: dropout on h_[CLS] in training.
    initializer_range: stddev of the Dense kernel's truncated normal (BERT's 0.02).
  """

  def __init__(self, num_labels: int, dropout_rate: float = 0.1,
               initializer_range: float = 0.02, **kwargs):
    super().__init__(**kwargs)
    if num_labels < 2:
      raise ValueError(f"num_labels must be >= 2, got {num_labels}")
    self.num_labels, self.dropout_rate = int(num_labels), float(dropout_rate)
    self.initializer_range = float(initializer_range)
    self.dropout = keras.layers.Dropout(self.dropout_rate)
    self.dense = keras.layers.Dense(
        self.num_labels, name="logits",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))

  def call(self, sequence_output, training=None):
    """[N, L, H] -> [N, C] float32 logits of the first ([CLS]) position."""
    cls = self.dropout(sequence_output[:, 0], training=training)
    return tf.cast(self.dense(cls), tf.float32)

  def get_config(self):
    return dict(super().get_config(), num_labels=self.num_labels,
                dropout_rate=self.dropout_rate, initializer_range=self.initializer_range)
