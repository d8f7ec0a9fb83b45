"""Keras layers of the REALM heads."""
from realm_tf.layers.embedding_projection import EmbeddingProjection
from realm_tf.layers.l2_normalization import L2Normalization
from realm_tf.layers.span_scorer import SpanScorer
