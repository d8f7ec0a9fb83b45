"""REALM models: the retriever and the knowledge-augmented encoder (reader)."""
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
