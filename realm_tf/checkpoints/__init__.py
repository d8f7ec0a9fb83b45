"""Loading published weights: REALM/ORQA TF1 checkpoints, Google BERT, HF safetensors.

    load_bert_checkpoint(encoder, "uncased_L-12_H-768_A-12/bert_model.ckpt")
    load_hf_bert(encoder, "all-MiniLM-L6-v2/")
    load_mlm_head(reader, "uncased_L-12_H-768_A-12/bert_model.ckpt")  # or HF safetensors
    load_realm_embedder(retriever, "cc_news_pretrained/embedder/variables/variables")
    load_realm_encoder(reader, "cc_news_pretrained/bert/variables/variables")
    load_orqa(retriever, reader, "orqa_nq_model_from_realm/export/best_default/checkpoint")

The runs' own TF2 checkpoints are restored with `tf2_checkpoint.restore_checked`.
"""
import os
import re

from absl import logging
import tensorflow as tf

from realm_tf.checkpoints import variable_maps
from realm_tf.checkpoints.hf_safetensors import MLM_PREFIX
from realm_tf.checkpoints.hf_safetensors import read_hf_bert
from realm_tf.checkpoints.tf1_checkpoint import CheckpointMismatchError
from realm_tf.checkpoints.tf1_checkpoint import load_arrays
from realm_tf.checkpoints.tf1_checkpoint import load_tf1_checkpoint
from realm_tf.checkpoints.tf1_checkpoint import tf1_arrays
from realm_tf.checkpoints.tf1_checkpoint import write_tf1_checkpoint


def load_bert_checkpoint(encoder, path: str) -> None:
  """A Google BERT TF1 checkpoint into a BERT encoder (its `cls/` pre-training heads unused)."""
  load_tf1_checkpoint(path, variable_maps.bert_map(encoder), ignore=(r"^cls/",))


def load_hf_bert(encoder, path: str) -> None:
  """HF-layout BERT safetensors (a file or a directory holding `model.safetensors`; its MLM
  head unused)."""
  load_arrays(path, read_hf_bert(path), variable_maps.bert_map(encoder), ignore=(r"^cls[/.]",))


def is_safetensors(path: str) -> bool:
  """Whether `path` names HF safetensors (a `.safetensors` file, or a directory without a TF
  checkpoint) rather than a TF1 checkpoint."""
  return path.endswith(".safetensors") or (
      os.path.isdir(path) and not tf.train.latest_checkpoint(path))


def _loader(path: str):
  """`load(variable_map, ignore, if_present) -> bool` over the TF1 checkpoint or the HF
  safetensors (read once, under TF1 names) at `path`."""
  if is_safetensors(path):
    arrays = read_hf_bert(path)
    return lambda variable_map, ignore, if_present=False: load_arrays(
        path, arrays, variable_map, ignore, if_present)
  return lambda variable_map, ignore, if_present=False: load_tf1_checkpoint(
      path, variable_map, ignore, if_present)


def _load_mlm_head(load, reader, path: str, prefix: str) -> bool:
  if is_safetensors(path):
    loaded = load(variable_maps.mlm_head_map(reader, MLM_PREFIX),
                  (r"^(?!cls[/.]predictions[/.])",), True)
  else:
    loaded = load(variable_maps.mlm_head_map(reader, prefix), (f"^(?!{re.escape(prefix)})",), True)
  if not loaded:
    logging.info("%s has no MLM head: the reader keeps its initial one (the decoder tied to the "
                 "word embeddings, a fresh transform and output bias)", path)
  return loaded


def load_mlm_head(reader, path: str, prefix: str = "cls/predictions/") -> bool:
  """BERT's pre-trained MLM head into `reader.masked_lm`, when the checkpoint has one.

  Loads the transform (Dense kernel and bias), its LayerNorm (gamma, beta) and the output bias;
  the decoder is the encoder's word-embedding table, so load the encoder too (or use
  `load_bert_reader`). A checkpoint without the head (HF BertModel, sentence-transformers such
  as all-MiniLM-L6-v2) leaves the head at its initialisation (the tied decoder with a fresh
  transform) and says so once at INFO.

  Args:
    reader: a built `Reader`.
    path: a Google BERT TF1 checkpoint (prefix or directory), or HF safetensors (a
      `.safetensors` file or a directory holding `model.safetensors`; see `is_safetensors`).
    prefix: the head's scope in a TF1 checkpoint (HF names always map to `cls/predictions/`).

  Returns:
    Whether the head was loaded.

  Raises:
    CheckpointMismatchError: part of the head missing, a head variable of another shape (such
      as another vocabulary's output bias), or an HF decoder not tied to the word embeddings.
    FileNotFoundError: no checkpoint at `path`.
  """
  return _load_mlm_head(_loader(path), reader, path, prefix)


def load_bert_reader(reader, path: str) -> bool:
  """A reader's BERT weights from a Google BERT TF1 checkpoint or HF safetensors (see
  `load_mlm_head` for `path`): the encoder, and the MLM head when the checkpoint has one.

  The encoder's pooler, which the reader never uses, is loaded only when present (HF
  BertForMaskedLM has none); every other encoder variable must be there, as in
  `load_bert_checkpoint` / `load_hf_bert`. Returns whether the MLM head was loaded.

  Raises:
    CheckpointMismatchError: as `load_bert_checkpoint` and `load_mlm_head`.
    FileNotFoundError: no checkpoint at `path`.
  """
  load = _loader(path)
  encoder_map = variable_maps.bert_map(reader.encoder)
  pooler = {n: v for n, v in encoder_map.items() if n.startswith("bert/pooler/")}
  load({n: v for n, v in encoder_map.items() if n not in pooler},
       (r"^cls[/.]", r"^bert/pooler/"))
  if not load(pooler, (r"^(?!bert/pooler/)",), True):
    logging.info("%s has no pooler: the reader's (unused) stays at its initialisation", path)
  return _load_mlm_head(load, reader, path, "cls/predictions/")


def load_realm_embedder(retriever, path: str, doc_tower_only: bool = False) -> None:
  """REALM's pre-trained embedder into both towers, or the doc tower alone (its unused MLM
  head is ignored)."""
  load_tf1_checkpoint(path, variable_maps.realm_embedder_map(retriever, doc_tower_only),
                      ignore=(r"/cls/predictions/",))


def load_realm_encoder(reader, path: str) -> None:
  """REALM's pre-trained knowledge-augmented encoder: BERT + MLM head."""
  load_tf1_checkpoint(path, variable_maps.realm_encoder_map(reader))


def load_orqa(retriever, reader, path: str, query_tower_only: bool = False) -> None:
  """An ORQA checkpoint fine-tuned from REALM: retriever (both towers, or the query tower
  alone) and span reader."""
  load_tf1_checkpoint(path, variable_maps.orqa_map(retriever, reader, query_tower_only),
                      ignore=(r"/cls/predictions/",))


__all__ = ["CheckpointMismatchError", "is_safetensors", "load_arrays", "load_bert_checkpoint",
           "load_bert_reader", "load_hf_bert", "load_mlm_head", "load_orqa", "load_realm_embedder",
           "load_realm_encoder", "load_tf1_checkpoint", "read_hf_bert", "tf1_arrays",
           "variable_maps", "write_tf1_checkpoint"]
