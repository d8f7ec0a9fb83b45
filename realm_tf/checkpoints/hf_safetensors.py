"""HF-layout BERT weights (`model.safetensors`) under TF1 BERT names.

HF `nn.Linear` weights are [out, in]; TF1 kernels are [in, out], so they are transposed.
Handles both `bert.`-prefixed (BertForX) and bare (BertModel, sentence-transformers) names.
The MLM head of BertForMaskedLM / BertForPreTraining (`cls.predictions.*`) comes out under
Google BERT's names (`cls/predictions/...`); its decoder is tied to the word embeddings.
"""
import os
import re
from typing import Dict, Optional

import numpy as np
import safetensors
from safetensors import numpy as safetensors_numpy

from realm_tf import errors

_RULES = (
    (r"embeddings\.word_embeddings\.weight", "embeddings/word_embeddings"),
    (r"embeddings\.position_embeddings\.weight", "embeddings/position_embeddings"),
    (r"embeddings\.token_type_embeddings\.weight", "embeddings/token_type_embeddings"),
    (r"embeddings\.LayerNorm\.(weight|gamma)", "embeddings/LayerNorm/gamma"),
    (r"embeddings\.LayerNorm\.(bias|beta)", "embeddings/LayerNorm/beta"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.weight",
     "encoder/layer_{0}/attention/self/{1}/kernel"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.bias",
     "encoder/layer_{0}/attention/self/{1}/bias"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.weight",
     "encoder/layer_{0}/attention/output/dense/kernel"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.bias",
     "encoder/layer_{0}/attention/output/dense/bias"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|gamma)",
     "encoder/layer_{0}/attention/output/LayerNorm/gamma"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(bias|beta)",
     "encoder/layer_{0}/attention/output/LayerNorm/beta"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.weight",
     "encoder/layer_{0}/intermediate/dense/kernel"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.bias",
     "encoder/layer_{0}/intermediate/dense/bias"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.weight", "encoder/layer_{0}/output/dense/kernel"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.bias", "encoder/layer_{0}/output/dense/bias"),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|gamma)",
     "encoder/layer_{0}/output/LayerNorm/gamma"),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(bias|beta)",
     "encoder/layer_{0}/output/LayerNorm/beta"),
    (r"pooler\.dense\.weight", "pooler/dense/kernel"),
    (r"pooler\.dense\.bias", "pooler/dense/bias"),
)
# BertForMaskedLM's MLM head, under Google BERT's `cls/predictions/` names (not `prefix`ed).
_MLM_RULES = (
    (r"cls\.predictions\.transform\.dense\.weight", "transform/dense/kernel"),
    (r"cls\.predictions\.transform\.dense\.bias", "transform/dense/bias"),
    (r"cls\.predictions\.transform\.LayerNorm\.(weight|gamma)", "transform/LayerNorm/gamma"),
    (r"cls\.predictions\.transform\.LayerNorm\.(bias|beta)", "transform/LayerNorm/beta"),
    # The output bias, saved as either or both of these (one tied parameter).
    (r"cls\.predictions\.(decoder\.)?bias", "output_bias"),
)
MLM_PREFIX = "cls/predictions/"
# Buffers and heads that are not weights of ours (the NSP head).
IGNORED = (r"position_ids$", r"^cls\.seq_relationship\.",
           r"^(bert\.)?embeddings\.token_type_ids$")


def resolve_safetensors_path(path: str) -> str:
  """`path` itself, or `model.safetensors` inside a directory (HF or sentence-transformers)."""
  if os.path.isdir(path):
    for candidate in ("model.safetensors", os.path.join("model", "model.safetensors")):
      if os.path.isfile(os.path.join(path, candidate)):
        return os.path.join(path, candidate)
    raise FileNotFoundError(f"No model.safetensors in {path}")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"No safetensors file at {path}")
  return path


def _tf1_name(hf_name: str, prefix: str) -> Optional[str]:
  bare = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
  for rules, rule_prefix in ((_RULES, prefix), (_MLM_RULES, MLM_PREFIX)):
    for pattern, template in rules:
      match = re.fullmatch(pattern, bare)
      if match:
        return rule_prefix + template.format(*match.groups())
  if hf_name == "cls.predictions.decoder.weight":  # The tied decoder: the word embeddings.
    return prefix + "embeddings/word_embeddings"
  return None


def read_hf_bert(path: str, prefix: str = "bert/") -> Dict[str, np.ndarray]:
  """Reads HF BERT weights and returns them under TF1 names (`{prefix}encoder/layer_0/...`,
  `cls/predictions/...` for an MLM head).

  Tensors that match no rule and no IGNORED pattern keep their HF name, so the strict loader
  reports them as unexpected. So does a second copy of a tied tensor (the MLM decoder's weight
  or bias) that differs from the first: our decoder is always tied; an equal copy is dropped.
  """
  path = resolve_safetensors_path(path)
  try:
    tensors = safetensors_numpy.load_file(path)
  except safetensors.SafetensorError as e:
    raise errors.InputError(errors.describe(
        path, f"not a safetensors file ({e})",
        "Pass a model.safetensors of a Hugging Face BERT, or its directory")) from e
  arrays = {}
  # The head last, so that a decoder weight is compared with the word embeddings.
  for hf_name in sorted(tensors, key=lambda n: n.startswith("cls.")):
    value = tensors[hf_name]
    if any(re.search(p, hf_name) for p in IGNORED):
      continue
    name = _tf1_name(hf_name, prefix)
    if name is None or (name in arrays and not np.array_equal(arrays[name], value)):
      arrays[hf_name] = value
    elif name not in arrays:
      arrays[name] = value.T if name.endswith("/kernel") else value
  return arrays
