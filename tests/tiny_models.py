"""Untrained tiny towers, built, as the tests make them (over `realm_tf.tiny_world`'s vocabulary
unless told otherwise), and six short texts with their vocabulary for the tests that embed text.
"""
import tensorflow as tf

from realm_tf import configs
from realm_tf import pretrained
from realm_tf import tiny_world
from realm_tf.signatures.doc_embedder import export_doc_embedder

ENCODER = configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB))

TEXT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on",
              "mat", "paris", "is", "in", "france", "who", "where", "a", "river", "flows", "?",
              "."]
TITLES = ["cat", "dog", "paris", "river", "mat", "france"]
BODIES = ["the cat sat on the mat .", "the dog sat .", "paris is in france .",
          "a river flows in france .", "the mat is on the dog .", "france is in france ."]


def retriever(encoder: configs.EncoderConfig = ENCODER, projection_size: int = 8, **settings):
  """A built retriever of `encoder`; `settings`: other `RetrieverConfig` fields."""
  built = configs.build_retriever(configs.RetrieverConfig(
      encoder=encoder, projection_size=projection_size, **settings))
  built.build()
  return built


def retriever_and_reader(encoder: configs.EncoderConfig = ENCODER, seed: int = 0):
  """A built retriever (projection 16) and reader (span head 8) of `encoder`, their weights
  drawn after seeding every generator with `seed`."""
  tf.keras.utils.set_random_seed(seed)
  built = configs.build_retriever(configs.RetrieverConfig(encoder=encoder, projection_size=16))
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder, span_hidden_size=8))
  built.build()
  reader.build()
  return built, reader


def minilm_doc_embedder(path: str, snapshot_step: int) -> str:
  """Exports to `path` the doc embedder of a tiny retriever over MiniLM's vocabulary, what the
  corpus pipelines' index builder embeds with; returns `path`."""
  tokenizer = pretrained.minilm_tokenizer()
  return export_doc_embedder(
      retriever(configs.EncoderConfig.tiny(vocab_size=tokenizer.vocab_size)), path,
      tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, snapshot_step=snapshot_step)
