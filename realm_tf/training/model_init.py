"""Building the towers a training stage starts from.

`init_weights` names where BERT weights come from: "" (random), "minilm" (the offline
all-MiniLM-L6-v2 package), a directory or file of HF safetensors, or a TF1 BERT checkpoint
prefix (Google BERT). A previous stage's saved retriever/reader (`models.saving`) wins over
all of these.
"""
import dataclasses
import os
from typing import Optional

import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import pretrained
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.models.saving import load_model

ENCODERS = ("tiny", "minilm_l6", "bert_base")


def encoder_config(name: str, vocab_size: int, dropout_rate: Optional[float] = None,
                   initializer_range: Optional[float] = None) -> configs.EncoderConfig:
  """The named preset sized for `vocab_size`, with optional dropout / init overrides."""
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


def load_bert_weights(encoder, init_weights: str) -> None:
  """Loads BERT weights named by `init_weights` (see module docstring) into `encoder`."""
  if not init_weights:
    return
  if init_weights == "minilm":
    checkpoints.load_hf_bert(encoder, pretrained.minilm_dir())
  elif init_weights.endswith(".safetensors") or (
      os.path.isdir(init_weights) and not tf.train.latest_checkpoint(init_weights)):
    checkpoints.load_hf_bert(encoder, init_weights)
  else:
    checkpoints.load_bert_checkpoint(encoder, init_weights)


def build_retriever(encoder: configs.EncoderConfig, share_towers: bool = True,
                    init_weights: str = "", saved_dir: str = "",
                    projection_size: int = 128) -> Retriever:
  """A saved retriever, or a new one with BERT weights from `init_weights`."""
  if saved_dir:
    return load_model(saved_dir)
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=encoder, projection_size=projection_size, share_towers=share_towers))
  retriever.build()
  for tower in {id(e): e for e in (retriever.query_encoder, retriever.doc_encoder)}.values():
    load_bert_weights(tower, init_weights)
  return retriever


def build_reader(encoder: configs.EncoderConfig, init_weights: str = "",
                 saved_dir: str = "") -> Reader:
  """A saved reader, or a new one with BERT weights from `init_weights`."""
  if saved_dir:
    return load_model(saved_dir)
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder))
  reader.build()
  load_bert_weights(reader.encoder, init_weights)
  return reader
