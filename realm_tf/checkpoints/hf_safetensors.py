"""HF-layout BERT weights (`model.safetensors`) under TF1 BERT names.

HF `nn.Linear` weights are [out, in]; TF1 kernels are [in, out], so they are transposed.
Handles both `bert.`-prefixed (BertForX) and bare (BertModel, sentence-transformers) names.
"""
import os
import re
from typing import Dict

import numpy as np
from safetensors import numpy as safetensors_numpy

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
# Buffers and heads that are not encoder weights.
IGNORED = (r"position_ids$", r"^cls\.", r"^(bert\.)?embeddings\.token_type_ids$")


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


def read_hf_bert(path: str, prefix: str = "bert/") -> Dict[str, np.ndarray]:
  """Reads HF BERT weights and returns them under TF1 names (`{prefix}encoder/layer_0/...`).

  Tensors that match no rule and no IGNORED pattern keep their HF name, so the strict loader
  reports them as unexpected.
  """
  tensors = safetensors_numpy.load_file(resolve_safetensors_path(path))
  arrays = {}
  for hf_name, value in tensors.items():
    if any(re.search(p, hf_name) for p in IGNORED):
      continue
    bare = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    for pattern, template in _RULES:
      match = re.fullmatch(pattern, bare)
      if match:
        name = prefix + template.format(*match.groups())
        arrays[name] = value.T if name.endswith("/kernel") else value
        break
    else:
      arrays[hf_name] = value
  return arrays
