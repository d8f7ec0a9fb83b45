"""Encoder presets and the weights every stage's towers start from, in one place.

`encoder_config(name)`: "minilm_l6" (all-MiniLM-L6-v2's size, `DEFAULT_ENCODER`: every
binary's default), "bert_base" (REALM's size) or "tiny" (tests). `resolve_head`: the retriever
head, "realm", "sentence", or "auto" (the head the weights were trained with). BERT weights
(the binaries' `--init_weights`, "minilm" in the three trainers): "minilm" (the offline
all-MiniLM-L6-v2 package), a directory or file of HF safetensors, a Google BERT TF1 checkpoint
prefix, or "random" ("" alike); they fill only the towers no other source fills, and towers
left random are named in one warning line (`note_random_start`): never a silent random BERT.

ICT and REALM pre-training build their towers with `build_retriever` / `build_reader` (a
previous stage's saved tower wins over BERT weights). Open-QA builds its model from a
`ModelConfig` (`build_models`) and loads an `InitConfig` into it (`initialize`): a REALM
pre-training checkpoint, released REALM / ORQA TF1 checkpoints, or BERT weights.
"""
import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import errors
from realm_tf import pretrained
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.losses.open_qa_loss import SPAN_NORMALIZATIONS
from realm_tf.models.reader import DEFAULT_SPAN_HEAD
from realm_tf.models.reader import Reader
from realm_tf.models.reader import SPAN_HEADS
from realm_tf.models.retriever import Retriever
from realm_tf.models.saving import load_model
from realm_tf.tokenization import doc_input as doc_inputs

ENCODERS = ("tiny", "minilm_l6", "bert_base")
DEFAULT_ENCODER = "minilm_l6"
HEAD_CHOICES = ("auto",) + configs.RETRIEVER_HEADS


def encoder_config(name: str, vocab_size: int, dropout_rate: Optional[float] = None,
                   initializer_range: Optional[float] = None) -> configs.EncoderConfig:
  """The preset `name` (one of `ENCODERS`) for a vocabulary of `vocab_size`, with optional
  dropout / initializer-range overrides."""
  if name == "tiny":
    config = configs.EncoderConfig.tiny(vocab_size=vocab_size)
  elif name == "minilm_l6":
    config = dataclasses.replace(configs.EncoderConfig.minilm_l6(), vocab_size=vocab_size)
  elif name == "bert_base":
    config = configs.EncoderConfig.bert_base(vocab_size=vocab_size)
  else:
    raise ValueError(f"encoder must be one of {ENCODERS}, got {name!r}")
  overrides = {}
  if dropout_rate is not None:
    overrides.update(dropout_rate=dropout_rate, attention_dropout_rate=dropout_rate)
  if initializer_range is not None:
    overrides.update(initializer_range=initializer_range)
  return dataclasses.replace(config, **overrides)


def resolve_head(head: str, bert_weights: str) -> str:
  """"auto" -> the head the weights were trained with: "sentence" (mean pooling, unit length)
  for all-MiniLM-L6-v2 ("minilm"), "realm" ([CLS] pooler, Dense, LayerNorm) otherwise."""
  if head == "auto":
    return "sentence" if bert_weights == "minilm" else "realm"
  if head not in configs.RETRIEVER_HEADS:
    raise ValueError(f"retriever head must be one of {HEAD_CHOICES}, got {head!r}")
  return head


RANDOM_WEIGHTS = "random"


def is_random(bert_weights: str) -> bool:
  """Whether `bert_weights` asks for random initialisation ("random", or "")."""
  return bert_weights in ("", RANDOM_WEIGHTS)


def note_random_start(towers: Sequence[str]) -> None:
  """Logs one warning line naming `towers` ("the retriever", ...) that start from random
  weights (none: nothing): a run that trains random BERTs says so."""
  if towers:
    logging.warning("%s start%s from random weights (--init_weights=random): fine for toy "
                    "worlds and tests, not for real text; pass --init_weights=minilm (or other "
                    "BERT weights) to start from trained ones", " and ".join(towers).capitalize(),
                    "" if len(towers) > 1 else "s")


def _weights_path(bert_weights: str) -> str:
  return pretrained.minilm_dir() if bert_weights == "minilm" else bert_weights


def load_bert_weights(encoder, bert_weights: str) -> None:
  """Loads the BERT weights `bert_weights` (see the module docstring) into `encoder`."""
  if is_random(bert_weights):
    return
  path = _weights_path(bert_weights)
  if bert_weights == "minilm" or path.endswith(".safetensors") or (
      os.path.isdir(path) and not tf.train.latest_checkpoint(path)):
    checkpoints.load_hf_bert(encoder, path)
  else:
    checkpoints.load_bert_checkpoint(encoder, path)


def load_reader_weights(reader: Reader, bert_weights: str) -> bool:
  """Loads `bert_weights` into the reader's BERT, and its MLM head (transform, LayerNorm,
  output bias) when that checkpoint has one (Google BERT, REALM); without one
  (all-MiniLM-L6-v2) the head keeps its initialisation and the decoder is tied (warm it up
  with `training.mlm_warmup`). Returns whether an MLM head was loaded."""
  return not is_random(bert_weights) and checkpoints.load_bert_reader(
      reader, _weights_path(bert_weights))


def build_retriever(encoder: configs.EncoderConfig, share_towers: bool = True,
                    bert_weights: str = "", saved_dir: str = "",
                    projection_size: int = 128, head: str = "auto",
                    doc_input: str = doc_inputs.DEFAULT_DOC_INPUT) -> Retriever:
  """A saved retriever (with its own `doc_input`: the form it was trained on wins), or a new
  one with BERT weights from `bert_weights`, the retrieval head `resolve_head(head,
  bert_weights)` and the doc tower's block form `doc_input`."""
  if saved_dir:
    return load_model(saved_dir)
  retriever = configs.build_retriever(configs.retriever_config(
      resolve_head(head, bert_weights), encoder, share_towers, projection_size, doc_input))
  retriever.build()
  for tower in {id(e): e for e in (retriever.query_encoder, retriever.doc_encoder)}.values():
    load_bert_weights(tower, bert_weights)
  return retriever


def build_reader(encoder: configs.EncoderConfig, bert_weights: str = "",
                 saved_dir: str = "", span_hidden_size: int = 256,
                 max_span_width: int = 10, span_head: str = DEFAULT_SPAN_HEAD) -> Reader:
  """A saved reader, or a new one with `load_reader_weights(bert_weights)` and the span head
  `span_head` of `span_hidden_size`, `max_span_width` (`ModelConfig`'s)."""
  if saved_dir:
    return load_model(saved_dir)
  reader = configs.build_reader(configs.ReaderConfig(
      encoder=encoder, span_hidden_size=span_hidden_size, max_span_width=max_span_width,
      span_head=span_head))
  reader.build()
  load_reader_weights(reader, bert_weights)
  return reader


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The Open-QA model: BERT size, heads and input lengths.

  Attributes:
    encoder: the BERT of all three towers (query, doc, reader); default the
      `DEFAULT_ENCODER` preset for the 30522-wordpiece uncased BERT / MiniLM vocabulary.
    projection_size: D of the retrieval embeddings with the "realm" head (128).
    retriever_head: "realm" ([CLS] pooler -> Dense -> LayerNorm) or "sentence" (mean pooling
      -> unit length, D = hidden size; the head of all-MiniLM-L6-v2), `configs.retriever_config`.
    span_hidden_size, max_span_width: the span head (256, 10).
    span_head: the reader's span head (`models.reader.SPAN_HEADS`): "endpoint_mlp" (ORQA) or
      "markers" (the patent's start/end marker tokens read by two separate transformers,
      `layers.marker_span_scorer`); written to `model.json` only when not "endpoint_mlp".
    query_length: `[CLS] x [SEP]` wordpieces (ORQA: 64).
    block_length: `[CLS] title [SEP] body [SEP]` wordpieces (288).
    doc_input: the doc tower's block form (`tokenization.doc_input`): "title_body" (REALM's
      `[CLS] title [SEP] body [SEP]`) or "body" (`[CLS] body [SEP]`, the patent's body-only
      embedding), in `block_length` wordpieces; the retriever's, so saved with it (a
      `model.json` without it: "title_body"). The reader's input does not depend on it.
    reader_length: `[CLS] x [SEP] z_body [SEP]` wordpieces in fine-tuning (320).
    span_normalization: how the reader's span scores become p(y | x), in training and
      answering (`losses.open_qa_loss`): "joint" (ORQA: one softmax over every (block, span)
      pair of f(x, z) + g(s)) or "per_document" (the patent's eq. 9: p(z | x) times a softmax
      over each block's own spans).
  """
  encoder: configs.EncoderConfig = dataclasses.field(
      default_factory=lambda: encoder_config(DEFAULT_ENCODER, 30522))
  projection_size: int = 128
  retriever_head: str = "realm"
  span_hidden_size: int = 256
  max_span_width: int = 10
  query_length: int = 64
  block_length: int = BLOCK_LENGTH
  reader_length: int = 320
  span_normalization: str = "joint"
  doc_input: str = doc_inputs.DEFAULT_DOC_INPUT
  span_head: str = DEFAULT_SPAN_HEAD

  def __post_init__(self):
    doc_inputs.check(self.doc_input)
    if self.span_head not in SPAN_HEADS:
      raise ValueError(f"span_head must be one of {SPAN_HEADS}, got {self.span_head!r}")
    if self.span_normalization not in SPAN_NORMALIZATIONS:
      raise ValueError(f"span_normalization must be one of {SPAN_NORMALIZATIONS}, got "
                       f"{self.span_normalization!r}")
    if self.reader_length < self.query_length + 2:
      raise ValueError(f"reader_length {self.reader_length} must be >= query_length "
                       f"{self.query_length} + 2")

  def to_dict(self) -> Dict[str, Any]:
    """The fields as plain values; `doc_input` and `span_head` only when not their defaults,
    so that the `model.json` and `run_config.json` of default models are those written before
    they were settings (and resume as before)."""
    values = dataclasses.asdict(self)
    for key, default in (("doc_input", doc_inputs.DEFAULT_DOC_INPUT),
                         ("span_head", DEFAULT_SPAN_HEAD)):
      if values[key] == default:
        del values[key]
    return values

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> "ModelConfig":
    values = dict(values)
    values["encoder"] = configs.EncoderConfig(**values["encoder"])
    return cls(**values)


def build_models(config: ModelConfig, share_towers: bool = False) -> Tuple[Retriever, Reader]:
  """A retriever (separate towers unless `share_towers`) and a reader, all variables built."""
  retriever = configs.build_retriever(configs.retriever_config(
      config.retriever_head, config.encoder, share_towers, config.projection_size,
      config.doc_input))
  reader = configs.build_reader(configs.ReaderConfig(
      encoder=config.encoder, span_hidden_size=config.span_hidden_size,
      max_span_width=config.max_span_width, span_head=config.span_head))
  retriever.build()
  reader.build()
  return retriever, reader


@dataclasses.dataclass(frozen=True)
class InitConfig:
  """Where an Open-QA model's weights come from (at most one retriever and one reader source).

  Attributes:
    checkpoint: a TF2 checkpoint `tf.train.Checkpoint(retriever=..., reader=...)` (REALM
      pre-training), a prefix or a directory (latest checkpoint).
    checkpoint_share_towers: whether that checkpoint's retriever shares its towers.
    realm_embedder: the released REALM embedder (TF1) -> both retriever towers.
    realm_encoder: the released REALM knowledge-augmented encoder (TF1) -> reader.
    orqa: a released ORQA checkpoint (TF1) -> both retriever towers and the reader.
    bert_weights: BERT weights (see the module docstring) -> every BERT no other source
      fills, and the reader's MLM head when the checkpoint has one.
    index: precomputed embeddings of the corpus by the initial doc tower (the released
      `block_emb` checkpoint, a `.npy`): fine-tuning's or pre-training's step-0 index,
      checked on sampled blocks, instead of embedding the corpus
      (`retrieval.initial_index`).
  Nothing set: random initialisation (tests), with a warning line (`note_random_start`).
  """
  checkpoint: str = ""
  checkpoint_share_towers: bool = True
  realm_embedder: str = ""
  realm_encoder: str = ""
  orqa: str = ""
  bert_weights: str = ""
  index: str = ""


# The InitConfig fields that fill each tower of an Open-QA model, besides `bert_weights`.
_TOWER_SOURCES = (("retriever", ("checkpoint", "realm_embedder", "orqa")),
                  ("reader", ("checkpoint", "realm_encoder", "orqa")))
# InitConfig field -> its flag (`realm-finetune`).
_INIT_FLAGS = {"checkpoint": "--init_checkpoint", "realm_embedder": "--init_realm_embedder",
               "realm_encoder": "--init_realm_encoder", "orqa": "--init_orqa",
               "bert_weights": "--init_weights"}


def check_init_sources(init: InitConfig) -> None:
  """Raises `errors.InputError` naming the flags if `init` gives a tower of an Open-QA model
  two sources of its weights (`bert_weights` only fills the towers the others leave)."""
  for tower, fields in _TOWER_SOURCES:
    given = [f"{_INIT_FLAGS[field]}={getattr(init, field)}" for field in fields
             if getattr(init, field)]
    if len(given) > 1:
      raise errors.InputError(errors.describe(
          ", ".join(given), f"{len(given)} sources of the {tower}'s initial weights",
          "Pass one of them"))


def _copy_towers(source: Retriever, target: Retriever) -> None:
  target.query_encoder.set_weights(source.query_encoder.get_weights())
  target.query_projection.set_weights(source.query_projection.get_weights())
  target.doc_encoder.set_weights(source.doc_encoder.get_weights())
  target.doc_projection.set_weights(source.doc_projection.get_weights())


def _restorable_reader(reader: Reader, path: str):
  """`reader`, or its encoder and MLM head alone when checkpoint `path` holds a span head of
  another form (`ModelConfig.span_head`): a new head of that form starts fresh (pre-training
  never trains the span head)."""
  names = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  saved = ("markers" if any(n.startswith("reader/span_scorer/start_marker/") for n in names)
           else DEFAULT_SPAN_HEAD)
  if saved == reader.span_head:
    return reader
  logging.info("%s: span head %s; the reader's (%s) starts fresh", path, saved,
               reader.span_head)
  return tf.train.Checkpoint(**{name: item for name, item in reader.checkpoint_items.items()
                                if name != "span_scorer"})


def initialize(retriever: Retriever, reader: Reader, config: ModelConfig,
               init: InitConfig) -> None:
  """Loads the weights of `init` into a separate-tower retriever and a reader of `config`.

  Raises:
    errors.InputError: conflicting sources (`check_init_sources`); a checkpoint that does not
      fit the model (`CheckpointMismatchError`).
  """
  check_init_sources(init)
  if init.checkpoint:
    source, _ = build_models(config, share_towers=init.checkpoint_share_towers)
    path = (tf.train.latest_checkpoint(init.checkpoint)
            if tf.io.gfile.isdir(init.checkpoint) else init.checkpoint)
    if not path:
      raise FileNotFoundError(f"no checkpoint in {init.checkpoint}")
    tf2_checkpoint.restore_checked(tf.train.Checkpoint(
        retriever=source, reader=_restorable_reader(reader, path)), path, read=True)
    _copy_towers(source, retriever)
  if init.realm_embedder:
    checkpoints.load_realm_embedder(retriever, init.realm_embedder)
  if init.realm_encoder:
    checkpoints.load_realm_encoder(reader, init.realm_encoder)
  if init.orqa:
    checkpoints.load_orqa(retriever, reader, init.orqa)
  empty = [tower for tower, fields in _TOWER_SOURCES
           if not any(getattr(init, field) for field in fields)]
  if "retriever" in empty:
    for tower in (retriever.query_encoder, retriever.doc_encoder):
      load_bert_weights(tower, init.bert_weights)
  if "reader" in empty:
    load_reader_weights(reader, init.bert_weights)
  note_random_start([f"the {tower}" for tower in empty if is_random(init.bert_weights)])
