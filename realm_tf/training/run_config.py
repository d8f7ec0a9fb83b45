"""Checked resumes: a run's structural configuration is saved with its first checkpoint, and
every restore verifies it and that each model variable was restored.

`run_config.json` beside the checkpoints holds what a checkpoint cannot be resumed without: the
task, the encoder sizes, `share_towers`, the retriever head and `doc_input`, the vocabulary and
corpus fingerprints. A resume whose configuration differs raises `errors.InputError` with a
one-line diff (`retriever.share_towers: saved False, now True`); a checkpoint that leaves a
model variable unrestored (a tower it never held) raises one naming the checkpoint
(`realm_tf.checkpoints.tf2_checkpoint.restore_checked`, which every restore goes through).
"""
import hashlib
import json
import os
from typing import Any, Dict, Mapping, Sequence

import tensorflow as tf
from absl import logging

from realm_tf import errors

RUN_CONFIG = "run_config.json"
_ENCODER_KEYS = ("vocab_size", "hidden_size", "num_layers", "num_attention_heads", "inner_dim",
                 "max_sequence_length", "type_vocab_size")


def vocab_fingerprint(vocabulary: Sequence[str]) -> str:
  """sha256 of the wordpieces in id order."""
  return hashlib.sha256("\n".join(vocabulary).encode("utf-8")).hexdigest()


def encoder_structure(encoder) -> Dict[str, Any]:
  """The sizes of a Model Garden BERT encoder."""
  config = encoder.get_config()
  return {k: config[k] for k in _ENCODER_KEYS if k in config}


def retriever_structure(retriever) -> Dict[str, Any]:
  """Its sizes and heads, and its `doc_input` when not "title_body" (the structure of
  title_body retrievers is the one written before it was a setting)."""
  structure = {"encoder": encoder_structure(retriever.query_encoder),
               "share_towers": bool(retriever.share_towers),
               "retriever_head": f"{retriever.pooling}/{retriever.projection}",
               "projection_size": int(retriever.projection_size)}
  if retriever.doc_input != "title_body":
    structure["doc_input"] = retriever.doc_input
  return structure


def reader_structure(reader) -> Dict[str, Any]:
  """The encoder's structure, and the span head's form when not ORQA's (so that the run
  configs of endpoint-MLP readers are those written before it was a setting)."""
  structure = {"encoder": encoder_structure(reader.encoder)}
  if reader.span_head != "endpoint_mlp":  # `models.reader.DEFAULT_SPAN_HEAD`
    structure["span_head"] = reader.span_head
  return structure


def flatten(values: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
  """{"a": {"b": 1}} -> {"a.b": 1}."""
  flat = {}
  for key, value in values.items():
    if isinstance(value, Mapping):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[prefix + key] = value
  return flat


def _normalised(config: Dict[str, Any]) -> Dict[str, Any]:
  return json.loads(json.dumps(config, sort_keys=True))


def check(directory: str, config: Dict[str, Any], model_dir: str = "") -> None:
  """Raises `errors.InputError` when `directory/run_config.json` differs from `config` (a
  directory whose checkpoints predate run configs is resumed with a warning)."""
  path = os.path.join(directory, RUN_CONFIG)
  if not tf.io.gfile.exists(path):
    logging.warning("%s has checkpoints but no %s: resuming without checking the run's "
                    "configuration", directory, RUN_CONFIG)
    return
  with tf.io.gfile.GFile(path, "r") as f:
    saved = flatten(json.load(f))
  now = flatten(_normalised(config))
  diff = [f"{k}: saved {saved.get(k, '(absent)')}, now {now.get(k, '(absent)')}"
          for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
  if diff:
    raise errors.InputError(errors.describe(
        path, f"this run's configuration differs from the one its checkpoints were trained "
        f"with ({'; '.join(diff)})",
        f"Resume with the original flags, or train into a new --model_dir than "
        f"{model_dir or directory}"))


def save(directory: str, config: Dict[str, Any]) -> None:
  """Writes `directory/run_config.json` (atomically)."""
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, RUN_CONFIG)
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    json.dump(_normalised(config), f, indent=2, sort_keys=True)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
