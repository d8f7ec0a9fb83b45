"""Typed configs for the BERT towers, the retriever and the reader, with one factory each.

Sizes: `EncoderConfig.bert_base()` (REALM's size), `EncoderConfig.minilm_l6()` (the
all-MiniLM-L6-v2 weights the demo loads) and `EncoderConfig.tiny()` (tests), named by the
presets of `realm_tf.presets`; retriever heads "realm" and "sentence"
(`retriever_config`). Build with `build_encoder`, `build_retriever`, `build_reader`.
"""
import dataclasses

from official.nlp.modeling import networks

from realm_tf.keras import keras
from realm_tf.layers import activations
from realm_tf.models.reader import DEFAULT_SPAN_HEAD
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever


# 1 / the temperature sentence-transformers trains all-MiniLM-L6-v2-like models with.
SENTENCE_SCORE_SCALE = 20.0


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """A BERT transformer encoder.

  `hidden_act` is "gelu_approximate" (TF1 BERT / REALM checkpoints) or "gelu" (HF BERT).
  """
  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu_approximate"
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02

  def __post_init__(self):
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of "
                       f"num_attention_heads {self.num_attention_heads}")
    activations.get_activation(self.hidden_act)

  @classmethod
  def bert_base(cls, vocab_size: int = 30522) -> "EncoderConfig":
    return cls(vocab_size=vocab_size)

  @classmethod
  def minilm_l6(cls) -> "EncoderConfig":
    return cls(hidden_size=384, num_layers=6, num_attention_heads=12, intermediate_size=1536,
               hidden_act="gelu")

  @classmethod
  def tiny(cls, vocab_size: int = 128) -> "EncoderConfig":
    return cls(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=512)


@dataclasses.dataclass(frozen=True)
class RetrieverConfig:
  """Query and document towers: BERT -> pooling -> head (`realm_tf.models.retriever`).

  REALM's head (the defaults): [CLS] pooler -> Dense(projection_size) -> LayerNorm. A
  sentence-embedding checkpoint's own (`sentence_embedding`): mean pooling -> unit length,
  projection_size = the hidden size, queries scaled by `score_scale`.
  """
  encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
  projection_size: int = 128
  share_towers: bool = True
  layer_norm_epsilon: float = 1e-12
  pooling: str = "cls_pooled"
  projection: str = "dense_layernorm"
  score_scale: float = 1.0
  doc_input: str = "title_body"

  def __post_init__(self):
    if self.projection == "l2_normalize" and self.projection_size != self.encoder.hidden_size:
      raise ValueError(f"projection 'l2_normalize' keeps the hidden size: projection_size must "
                       f"be {self.encoder.hidden_size}, got {self.projection_size}")

  @classmethod
  def sentence_embedding(cls, encoder: EncoderConfig, share_towers: bool = True,
                         score_scale: float = SENTENCE_SCORE_SCALE,
                         doc_input: str = "title_body") -> "RetrieverConfig":
    """The head all-MiniLM-L6-v2 was trained with: mean pooling -> L2 normalisation."""
    return cls(encoder=encoder, projection_size=encoder.hidden_size, share_towers=share_towers,
               pooling="mean", projection="l2_normalize", score_scale=score_scale,
               doc_input=doc_input)


@dataclasses.dataclass(frozen=True)
class ReaderConfig:
  """Knowledge-augmented encoder: BERT + MLM head (pre-training) + span head (Open-QA)."""
  encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
  span_hidden_size: int = 256
  max_span_width: int = 10
  span_layer_norm_epsilon: float = 1e-3
  span_head: str = DEFAULT_SPAN_HEAD  # `models.reader.SPAN_HEADS`


RETRIEVER_HEADS = ("realm", "sentence")


def retriever_config(head: str, encoder: EncoderConfig, share_towers: bool = True,
                     projection_size: int = 128, doc_input: str = "title_body"
                     ) -> RetrieverConfig:
  """"realm": [CLS] pooler -> Dense(projection_size) -> LayerNorm; "sentence": mean pooling
  -> unit length (`RetrieverConfig.sentence_embedding`, projection_size unused); the doc
  tower reading blocks in the form `doc_input`."""
  if head == "realm":
    return RetrieverConfig(encoder=encoder, projection_size=projection_size,
                           share_towers=share_towers, doc_input=doc_input)
  if head == "sentence":
    return RetrieverConfig.sentence_embedding(encoder, share_towers, doc_input=doc_input)
  raise ValueError(f"retriever head must be one of {RETRIEVER_HEADS}, got {head!r}")


def build_encoder(config: EncoderConfig, name: str = "bert") -> networks.BertEncoderV2:
  """Builds a Model Garden `BertEncoderV2` from `config`."""
  return networks.BertEncoderV2(
      vocab_size=config.vocab_size,
      hidden_size=config.hidden_size,
      num_layers=config.num_layers,
      num_attention_heads=config.num_attention_heads,
      inner_dim=config.intermediate_size,
      inner_activation=activations.get_activation(config.hidden_act),
      output_dropout=config.dropout_rate,
      attention_dropout=config.attention_dropout_rate,
      max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size,
      initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
      name=name)


def build_retriever(config: RetrieverConfig) -> Retriever:
  """Builds a `Retriever` with shared or separate towers."""
  query_encoder = build_encoder(config.encoder, name="query_bert")
  doc_encoder = None if config.share_towers else build_encoder(config.encoder, name="doc_bert")
  return Retriever(query_encoder=query_encoder, doc_encoder=doc_encoder,
                   projection_size=config.projection_size,
                   layer_norm_epsilon=config.layer_norm_epsilon, pooling=config.pooling,
                   projection=config.projection, score_scale=config.score_scale,
                   doc_input=config.doc_input)


def build_reader(config: ReaderConfig) -> Reader:
  """Builds a `Reader` (knowledge-augmented encoder)."""
  return Reader(encoder=build_encoder(config.encoder, name="reader_bert"),
                mlm_activation=config.encoder.hidden_act,
                span_hidden_size=config.span_hidden_size,
                max_span_width=config.max_span_width,
                span_layer_norm_epsilon=config.span_layer_norm_epsilon,
                span_head=config.span_head)
