"""The one place realm_tf imports Keras.

Keras 2 through `tf_keras`: Model Garden and `hub.KerasLayer` are Keras 2, and
only Keras 2 writes TF SavedModels with `model.save`. Every module does
`from realm_tf.keras import keras`.
"""
import tf_keras as keras

__all__ = ["keras"]
