"""Names of our variables in the TF1 checkpoint layouts (Google BERT, REALM, ORQA).

A variable map is `{tf1_name: [variables]}`: every variable listed under a name takes that
checkpoint value (a list, so that two towers can be initialised from one shared embedder).
Model Garden stores attention kernels as [H, heads, head_dim] and [heads, head_dim, H] where
TF1 BERT has [H, H]; values are reshaped on the way in and out (same element order).
"""
import re
from typing import Dict, List

import tensorflow as tf

from realm_tf.keras import keras

VariableMap = Dict[str, List[tf.Variable]]

# (pattern on the tail of a Model Garden BertEncoderV2 variable name, TF1 name template).
_ENCODER_NAMES = (
    (r"word_embeddings/embeddings", "embeddings/word_embeddings"),
    (r"position_embedding/embeddings", "embeddings/position_embeddings"),
    (r"type_embeddings/embeddings", "embeddings/token_type_embeddings"),
    (r"embeddings/layer_norm/(gamma|beta)", "embeddings/LayerNorm/{0}"),
    (r"transformer/layer_(\d+)/self_attention/(query|key|value)/(kernel|bias)",
     "encoder/layer_{0}/attention/self/{1}/{2}"),
    (r"transformer/layer_(\d+)/self_attention/attention_output/(kernel|bias)",
     "encoder/layer_{0}/attention/output/dense/{1}"),
    (r"transformer/layer_(\d+)/self_attention_layer_norm/(gamma|beta)",
     "encoder/layer_{0}/attention/output/LayerNorm/{1}"),
    (r"transformer/layer_(\d+)/intermediate/(kernel|bias)",
     "encoder/layer_{0}/intermediate/dense/{1}"),
    (r"transformer/layer_(\d+)/output/(kernel|bias)", "encoder/layer_{0}/output/dense/{1}"),
    (r"transformer/layer_(\d+)/output_layer_norm/(gamma|beta)",
     "encoder/layer_{0}/output/LayerNorm/{1}"),
    (r"pooler_transform/(kernel|bias)", "pooler/dense/{0}"),
)


def _match_tail(variable: tf.Variable, table) -> str:
  name = variable.name.split(":")[0]
  for pattern, template in table:
    match = re.search(r"(?:^|/)" + pattern + "$", name)
    if match:
      return template.format(*match.groups())
  raise ValueError(f"Variable {variable.name} has no TF1 name in this layout")


def _merge(*maps: VariableMap) -> VariableMap:
  merged: VariableMap = {}
  for variable_map in maps:
    for name, variables in variable_map.items():
      merged.setdefault(name, []).extend(variables)
  return merged


def encoder_map(encoder: keras.layers.Layer, prefix: str = "bert/") -> VariableMap:
  """TF1 BERT names (`{prefix}embeddings/...`, `{prefix}encoder/layer_N/...`,
  `{prefix}pooler/...`) of a Model Garden BERT encoder's variables."""
  if not encoder.weights:
    raise ValueError(f"Encoder {encoder.name} has no variables yet; call it once first")
  return {prefix + _match_tail(v, _ENCODER_NAMES): [v] for v in encoder.weights}


def _head_map(layer: keras.layers.Layer, table, prefix: str, tied=None) -> VariableMap:
  """Names of a head's own variables; `tied` (the MLM decoder's word embeddings) is the
  encoder's and named there."""
  return {prefix + _match_tail(v, table): [v] for v in layer.weights if v is not tied}


_PROJECTION_NAMES = ((r"dense/(kernel|bias)", "dense/{0}"),
                     (r"LayerNorm/(gamma|beta)", "LayerNorm/{0}"))
_MLM_NAMES = ((r"transform/dense/(kernel|bias)", "transform/dense/{0}"),
              (r"transform/LayerNorm/(gamma|beta)", "transform/LayerNorm/{0}"),
              (r"output_bias/bias", "output_bias"))
_SPAN_NAMES = ((r"dense/(kernel|bias)", "dense/{0}"),
               (r"dense_1/(kernel|bias)", "dense_1/{0}"),
               (r"layer_normalization/(gamma|beta)", "layer_normalization/{0}"))


def bert_map(encoder: keras.layers.Layer) -> VariableMap:
  """A Google BERT TF1 checkpoint (`bert/...`) into one encoder."""
  return encoder_map(encoder, "bert/")


def realm_embedder_map(retriever, doc_tower_only: bool = False) -> VariableMap:
  """The released REALM pre-trained embedder (`cc_news_pretrained/embedder`).

  Its one tower initialises both of our towers when they are separate, or only the doc tower
  with `doc_tower_only` (the frozen tower that embedded the released index).
  """
  towers = _towers(retriever)[-1:] if doc_tower_only else _towers(retriever)
  return _merge(*(_merge(encoder_map(encoder, "module/module/module/bert/"),
                         _head_map(projection, _PROJECTION_NAMES, "module/module/"))
                  for encoder, projection in towers))


def mlm_head_map(reader, prefix: str = "cls/predictions/") -> VariableMap:
  """BERT's MLM head (`{prefix}transform/dense/...`, `{prefix}transform/LayerNorm/...`,
  `{prefix}output_bias`) of a reader; its decoder is the encoder's word embeddings."""
  if not reader.masked_lm.weights:
    raise ValueError(f"Reader {reader.name} has no MLM head variables yet; call build() first")
  return _head_map(reader.masked_lm, _MLM_NAMES, prefix,
                   tied=reader.encoder.get_embedding_table())


def realm_encoder_map(reader) -> VariableMap:
  """The released REALM pre-trained knowledge-augmented encoder (`cc_news_pretrained/bert`)."""
  return _merge(encoder_map(reader.encoder, "bert/"), mlm_head_map(reader))


def orqa_map(retriever, reader, query_tower_only: bool = False) -> VariableMap:
  """The released ORQA checkpoints fine-tuned from REALM (`orqa_{nq,wq}_model_from_realm`):
  their query tower into both retriever towers, or only the query tower with
  `query_tower_only` (their document index was embedded by the pre-trained embedder)."""
  if reader.span_head != "endpoint_mlp":  # `models.reader.DEFAULT_SPAN_HEAD`
    raise ValueError(f"ORQA checkpoints hold the endpoint-MLP span head; this reader's is "
                     f"{reader.span_head!r}: build it with span_head='endpoint_mlp'")
  towers = _towers(retriever)[:1] if query_tower_only else _towers(retriever)
  retriever_map = _merge(*(_merge(encoder_map(encoder, "module/module/module/module/bert/"),
                                  _head_map(projection, _PROJECTION_NAMES, "module/module/module/"))
                           for encoder, projection in towers))
  reader_map = _merge(encoder_map(reader.encoder, "reader/module/bert/"),
                      _head_map(reader.span_scorer, _SPAN_NAMES, "reader/"))
  return _merge(retriever_map, reader_map)


def _towers(retriever):
  if retriever.projection != "dense_layernorm":
    raise ValueError(f"REALM and ORQA checkpoints hold a Dense -> LayerNorm retrieval head; "
                     f"this retriever's is {retriever.projection!r}: build it with "
                     f"projection='dense_layernorm' and pooling='cls_pooled'")
  if retriever.share_towers:
    return [(retriever.query_encoder, retriever.query_projection)]
  return [(retriever.query_encoder, retriever.query_projection),
          (retriever.doc_encoder, retriever.doc_projection)]
