"""REALM pre-training inputs: masked queries from `examples-*.tfrecord`.

Each example is one sentence with its salient span (see `realm_tf.data.formats`); it is packed
as `[CLS] x [SEP]` (96) and masked by one strategy:
  "salient_span"  every wordpiece of the example's span -> [MASK] (REALM);
  "random_token"  BERT-style 15% of the wordpieces (ablation);
  "random_span"   a random contiguous span of 1..M wordpieces (ablation);
  "spanbert"      SpanBERT's geometric-length spans of whole words up to 15% (ablation).
An example whose span cannot be masked (cut by truncation, say) keeps all-zero weights: it is
counted in "unmaskable" and contributes nothing to the loss.
Legend: B batch, Lq query length, M max predictions.
"""
from typing import Dict

import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.tokenization import masking
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

MASKING = ("salient_span", "random_token", "random_span", "spanbert")


def masked_query_dataset(examples_dir: str, tokenizer: WordpieceTokenizer, batch_size: int,
                         masking_strategy: str = "salient_span", query_length: int = 96,
                         max_predictions: int = 10, seed: int = 0,
                         shuffle_buffer: int = 10000,
                         allow_unverified: bool = False) -> tf.data.Dataset:
  """An endless, shuffled dataset of batches:
    "query": [B, Lq] masked query features, "query_ids": [B, Lq - 2] masked x (padded with 0,
    length in "query_length"), "masked_lm_positions" / "masked_lm_ids" / "masked_lm_weights"
    [B, M], "block_id": [B] source block.

  Shards without a manifest are refused unless `allow_unverified` (`shards.check_shards`).
  """
  if masking_strategy not in MASKING:
    raise ValueError(f"masking_strategy must be one of {MASKING}, got {masking_strategy!r}")
  files = shards.check_shards(examples_dir, "examples", allow_unverified).files
  formats.check_schema(files, formats.parse_pretraining_example, "pre-training examples")
  featurizer = Featurizer(tokenizer, query_length=query_length)
  special = [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id]

  def mask(index, example) -> Dict[str, tf.Tensor]:
    features = featurizer.pack_queries(example["query_ids"])
    ids = features["input_word_ids"]
    if masking_strategy == "salient_span":
      masked = masking.salient_span_mask(
          ids, tf.cast(example["span_start"], tf.int32) + 1,
          tf.cast(example["span_end"], tf.int32) + 1, mask_id=tokenizer.mask_id,
          special_ids=special, max_predictions=max_predictions)
    elif masking_strategy == "random_token":
      masked = masking.random_token_mask(ids, mask_id=tokenizer.mask_id, special_ids=special,
                                         seed=[seed, index], max_predictions=max_predictions)
    elif masking_strategy == "random_span":
      masked = masking.random_span_mask(ids, mask_id=tokenizer.mask_id, special_ids=special,
                                        seed=[seed, index], max_predictions=max_predictions)
    else:
      masked = masking.spanbert_mask(ids, mask_id=tokenizer.mask_id, special_ids=special,
                                     continuation=tokenizer.continuation, seed=[seed, index],
                                     max_predictions=max_predictions)
    features["input_word_ids"] = masked["input_word_ids"]
    length = tf.reduce_sum(features["input_mask"]) - 2
    query_ids = masked["input_word_ids"][1:query_length - 1]
    query_ids = tf.where(tf.range(query_length - 2) < length, query_ids, 0)
    return {"query": features, "query_ids": query_ids, "query_length": length,
            "masked_lm_positions": masked["masked_lm_positions"],
            "masked_lm_ids": masked["masked_lm_ids"],
            "masked_lm_weights": masked["masked_lm_weights"],
            "block_id": example["block_id"]}

  return (tf.data.TFRecordDataset(files).map(formats.parse_pretraining_example)
          .repeat().shuffle(shuffle_buffer, seed=seed).enumerate()
          .map(graph_functions.dataset_fn(lambda i, e: mask(tf.cast(i, tf.int64), e)),
               num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch_size, drop_remainder=True).prefetch(2))
