"""MIPS benchmark: our ScaNN index vs raw ScaNN vs exact search on clustered vectors.

  python bench/mips_bench.py --num_docs=1000000 --dim=128

Prints and writes bench/results/mips.{md,json}: recall@k against exact search, queries/s
(batched), single-batch latency at a training batch (the in-graph cost per step), index build
time and bytes per document on disk.
"""
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from scann import scann_ops_pybind

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.mips.index_builder import build_index  # pylint: disable=g-import-not-at-top
from realm_tf.mips.index_loading import load_index  # pylint: disable=g-import-not-at-top

_NUM_DOCS = flags.DEFINE_integer("num_docs", 1_000_000, "N documents.")
_DIM = flags.DEFINE_integer("dim", 128, "D.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Queries per batched search.")
_K = flags.DEFINE_integer("k", 8, "Neighbours.")
_STEP_BATCH = flags.DEFINE_integer("step_batch", 16, "Queries per training step.")
_CLUSTERS = flags.DEFINE_integer("clusters", 1000, "Gaussian clusters.")
_NOISE = flags.DEFINE_float("noise", 0.5, "Within-cluster standard deviation (centres: 1).")


def clustered(n: int, num_queries: int, dim: int, clusters: int, noise: float):
  """Documents and queries drawn around the same Gaussian cluster centres."""
  rng = np.random.default_rng(0)
  centers = rng.standard_normal((clusters, dim)).astype(np.float32)
  draw = lambda size: (centers[rng.integers(clusters, size=size)] +
                       noise * rng.standard_normal((size, dim)).astype(np.float32))
  return draw(n), draw(num_queries)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
  return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact)]))


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  n, dim, k = _NUM_DOCS.value, _DIM.value, _K.value
  docs, queries = clustered(n, _NUM_QUERIES.value, dim, _CLUSTERS.value, _NOISE.value)
  step_queries = queries[:_STEP_BATCH.value]
  rows = []

  exact = build_index(docs, "brute_force")
  exact_ids = exact.search(queries, k)[1].numpy()
  seconds = bench_utils.best_time(lambda: exact.search(queries, k)[1].numpy())
  step = bench_utils.best_time(lambda: exact.search(step_queries, k)[1].numpy(), repeats=10)
  rows.append({"method": "exact (ours, chunked TF matmul)", "recall@k": 1.0,
               "queries/s": len(queries) / seconds, "step latency ms": 1e3 * step})

  started = time.perf_counter()
  index = build_index(docs, "scann")
  build_s = time.perf_counter() - started
  params = index.builder
  directory = tempfile.mkdtemp()
  try:
    index.save(directory)
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    reloaded = load_index(directory)
  finally:
    shutil.rmtree(directory)
  ours_ids = reloaded.search(queries, k)[1].numpy()
  seconds = bench_utils.best_time(lambda: reloaded.search(queries, k)[1].numpy())
  search_fn = tf.function(lambda q: reloaded.search(q, k))
  step = bench_utils.best_time(lambda: search_fn(step_queries)[1].numpy(), repeats=10)
  ours = {"method": "ScaNN (ours, TF op, reloaded)", "recall@k": recall(ours_ids, exact_ids),
          "queries/s": len(queries) / seconds, "step latency ms": 1e3 * step,
          "build s": build_s, "bytes/doc": size / n}
  rows.append(ours)

  started = time.perf_counter()
  builder = scann_ops_pybind.builder(docs, k, "dot_product")
  if params["num_leaves"] > 1:
    builder = builder.tree(num_leaves=params["num_leaves"],
                           num_leaves_to_search=params["num_leaves_to_search"],
                           training_sample_size=params["training_sample_size"]).score_ah(
        params["dimensions_per_block"],
        anisotropic_quantization_threshold=params["anisotropic_quantization_threshold"]
    ).reorder(params["reorder_k"])
  else:
    builder = builder.score_brute_force()
  raw = builder.build()
  raw_build_s = time.perf_counter() - started
  raw_ids = raw.search_batched_parallel(queries, final_num_neighbors=k)[0]
  seconds = bench_utils.best_time(
      lambda: raw.search_batched_parallel(queries, final_num_neighbors=k))
  step = bench_utils.best_time(
      lambda: raw.search_batched(step_queries, final_num_neighbors=k), repeats=10)
  rows.append({"method": "ScaNN (raw pybind, same parameters)",
               "recall@k": recall(raw_ids, exact_ids), "queries/s": len(queries) / seconds,
               "step latency ms": 1e3 * step, "build s": raw_build_s})

  speedup = ours["queries/s"] / rows[0]["queries/s"]
  wrapper = ours["queries/s"] / rows[2]["queries/s"]
  markdown = (f"N = {n:,} × D = {dim} clustered float32 vectors, {len(queries)} queries, "
              f"k = {k}; ScaNN: {params['num_leaves']} leaves, "
              f"{params['num_leaves_to_search']} searched, AH {params['dimensions_per_block']} "
              f"dims/block, reorder {params['reorder_k']}.\n\n" +
              bench_utils.markdown_table(rows, ["method", "recall@k", "queries/s",
                                                "step latency ms", "build s", "bytes/doc"]) +
              f"\nScaNN (ours) vs exact: {speedup:.1f}× queries/s at recall@{k} "
              f"{ours['recall@k']:.3f}; ours vs raw ScaNN: {wrapper:.2f}× queries/s. "
              f"fp32 exact index: {4 * dim} bytes/doc.\n")
  print(markdown)
  print(bench_utils.write_results("mips", rows, markdown))


if __name__ == "__main__":
  app.run(main)
