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

ENCODERS = configs.ENCODER_PRESETS
HEAD_CHOICES = ("auto",) + configs.RETRIEVER_HEADS


def resolve_head(head: str, init_weights: str) -> str:
  """"auto" -> the head the weights were trained with: "sentence" (mean pooling, unit length)
  for all-MiniLM-L6-v2 ("minilm"), "realm" ([CLS] pooler, Dense, LayerNorm) otherwise."""
  if head == "auto":
    return "sentence" if init_weights == "minilm" else "realm"
  if head not in configs.RETRIEVER_HEADS:
    raise ValueError(f"retriever head must be one of {HEAD_CHOICES}, got {head!r}")
  return head


def encoder_config(name: str, vocab_size: int, dropout_rate: Optional[float] = None,
                   initializer_range: Optional[float] = None) -> configs.EncoderConfig:
  """The named preset sized for `vocab_size`, with optional dropout / init overrides."""
  config = configs.encoder_preset(name, vocab_size)
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
                    projection_size: int = 128, head: str = "auto") -> Retriever:
  """A saved retriever, or a new one with BERT weights from `init_weights` and the retrieval
  head `resolve_head(head, init_weights)`."""
  if saved_dir:
    return load_model(saved_dir)
  retriever = configs.build_retriever(configs.retriever_config(
      resolve_head(head, init_weights), encoder, share_towers, projection_size))
  retriever.build()
  for tower in {id(e): e for e in (retriever.query_encoder, retriever.doc_encoder)}.values():
    load_bert_weights(tower, init_weights)
  return retriever


def build_reader(encoder: configs.EncoderConfig, init_weights: str = "",
                 saved_dir: str = "") -> Reader:
  """A saved reader, or a new one with BERT weights from `init_weights`, and its MLM head
  (transform, LayerNorm, output bias) when that checkpoint has one (Google BERT, REALM);
  without one (all-MiniLM-L6-v2) the head starts fresh and the decoder is tied."""
  if saved_dir:
    return load_model(saved_dir)
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder))
  reader.build()
  if init_weights:  # the BERT, and the MLM head when the checkpoint has one
    checkpoints.load_bert_reader(
        reader, pretrained.minilm_dir() if init_weights == "minilm" else init_weights)
  return reader
