"""The index builder's launcher memory against the number of blocks, and its 13.3M model.

  python bench/index_builder_memory.py --num_blocks=10000,100000,300000,1000000

For each N: synthetic float32 [N, 128] embeddings are written as the embedding pipeline's
shards (one per 100k blocks), then a fresh process runs the launcher's part of pipeline 3
after the Beam stage, `build_index_lib.publish_embeddings` (read the shards into one array,
check them against the corpus ids, build ScaNN with the default settings or `--scann_*`,
save, verify and publish), and reports its peak resident memory (`ru_maxrss`) and its
resident memory before the call (Python, TensorFlow, ScaNN loaded). A least-squares line
peak = a + b·N gives bytes per block and the constant, extrapolated to REALM's 13,353,718
blocks. Writes bench/results/index_builder_memory.{md,json}.
"""
import multiprocessing
import os
import resource
import sys
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from pipelines import build_index_lib  # pylint: disable=g-import-not-at-top
from realm_tf.data import formats  # pylint: disable=g-import-not-at-top
from realm_tf.data import shards  # pylint: disable=g-import-not-at-top
from realm_tf.mips import index_builder  # pylint: disable=g-import-not-at-top

_NUM_BLOCKS = flags.DEFINE_list("num_blocks", ["10000", "100000", "300000", "1000000"],
                                "Corpus sizes N to measure.")
_DIM = flags.DEFINE_integer("dim", 128, "Embedding dimension D.")
_KIND = flags.DEFINE_enum("index_kind", "scann", index_builder.KINDS, "Index to build.")
_LEAVES = flags.DEFINE_integer("scann_num_leaves", 0, "ScaNN leaves; 0: sqrt(N).")
_SEARCHED = flags.DEFINE_integer("scann_num_leaves_to_search", 0,
                                 "ScaNN leaves searched; 0: 1/20 of the leaves.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", "bench/results", "Where results go.")

FULL_SCALE = 13_353_718
_KIB = 1024


def _rss_bytes() -> int:
  with open("/proc/self/statm", encoding="ascii") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def write_shards(directory: str, num_blocks: int, dim: int, seed: int = 0) -> np.ndarray:
  """Writes N synthetic embeddings as the pipeline's shards; returns the sorted block ids [N]."""
  rng = np.random.default_rng(seed)
  ids = np.unique(rng.integers(0, 1 << 63, size=num_blocks + num_blocks // 100 + 10,
                               dtype=np.int64))[:num_blocks]
  rng.shuffle(ids)
  ids = np.sort(ids[:num_blocks])
  num_shards = max(1, -(-num_blocks // build_index_lib.BLOCKS_PER_SHARD))
  owner = np.array([build_index_lib.shard_of(i, num_shards) for i in ids])
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for shard in range(num_shards):
    rows = np.nonzero(owner == shard)[0]
    with tf.io.TFRecordWriter(build_index_lib.shard_path(directory, shard, num_shards)) as w:
      for begin in range(0, len(rows), 10_000):
        chunk = rows[begin:begin + 10_000]
        vectors = rng.standard_normal((len(chunk), dim)).astype(np.float32)
        for block_id, vector in zip(ids[chunk], vectors):
          w.write(formats.embedding_example(int(block_id), vector))
  shards.write_manifest(directory, build_index_lib.EMBEDDINGS_PREFIX, {"synthetic": True})
  return ids


def _launcher(directory, num_shards, ids, dim, index_root, kind, scann, queue) -> None:
  """The measured process: the launcher's part of `build_index` after the pipeline."""
  before = _rss_bytes()
  start = time.perf_counter()
  published = build_index_lib.publish_embeddings(directory, num_shards, ids, dim, index_root,
                                                 "step-00000001", {"num_blocks": len(ids)},
                                                 kind, scann)
  seconds = time.perf_counter() - start
  size = sum(os.path.getsize(os.path.join(published, f)) for f in os.listdir(published))
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _KIB  # Linux: KiB
  queue.put({"rss_before": before, "peak_rss": peak, "seconds": seconds, "index_bytes": size})


def measure(num_blocks: int, dim: int, kind: str, scann: index_builder.ScannSettings):
  """One row: the launcher's peak resident memory for N blocks."""
  with tempfile.TemporaryDirectory() as tmp:
    embeddings_dir = os.path.join(tmp, "embeddings")
    os.makedirs(embeddings_dir)
    ids = write_shards(embeddings_dir, num_blocks, dim)
    num_shards = max(1, -(-num_blocks // build_index_lib.BLOCKS_PER_SHARD))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_launcher, args=(
        embeddings_dir, num_shards, ids, dim, os.path.join(tmp, "index"), kind, scann, queue))
    process.start()
    row = queue.get()
    process.join()
    if process.exitcode:
      raise RuntimeError(f"the launcher for N={num_blocks} exited with {process.exitcode}")
  embeddings_bytes = num_blocks * dim * 4
  return {"num_blocks": num_blocks, "dim": dim, **row,
          "peak_over_embeddings": (row["peak_rss"] - row["rss_before"]) / embeddings_bytes}


def fit(rows):
  """Least squares peak = a + b·N; returns (a bytes, b bytes per block)."""
  n = np.array([r["num_blocks"] for r in rows], np.float64)
  peak = np.array([r["peak_rss"] for r in rows], np.float64)
  b, a = np.polyfit(n, peak, 1) if len(rows) > 1 else (peak[0] / n[0], 0.0)
  return float(a), float(b)


def main(argv):
  del argv
  scann = index_builder.ScannSettings(num_leaves=_LEAVES.value,
                                      num_leaves_to_search=_SEARCHED.value)
  machine = bench_utils.machine_line()
  print(machine, flush=True)
  rows = []
  for num_blocks in sorted(int(n) for n in _NUM_BLOCKS.value):
    rows.append(measure(num_blocks, _DIM.value, _KIND.value, scann))
    print(rows[-1], flush=True)
  a, b = fit(rows)
  full = a + b * FULL_SCALE
  gib = lambda x: x / (1 << 30)
  lines = [
      "# Index builder: launcher memory vs blocks", "", machine, "",
      f"Index: {_KIND.value}, settings {scann}, D = {_DIM.value}, float32 synthetic "
      "embeddings, one shard per 100k blocks.", "",
      "| blocks N | RSS before (MiB) | peak RSS (MiB) | (peak - before) / (N·D·4) | "
      "seconds | index on disk (MiB) |", "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['num_blocks']:,} | {r['rss_before'] / 2**20:.0f} | "
                 f"{r['peak_rss'] / 2**20:.0f} | {r['peak_over_embeddings']:.2f} | "
                 f"{r['seconds']:.1f} | {r['index_bytes'] / 2**20:.0f} |")
  lines += ["", f"Fit: peak = {gib(a):.2f} GiB + {b:.0f} bytes/block × N "
            f"({b / (_DIM.value * 4):.2f}× the {_DIM.value * 4} bytes of one embedding).",
            f"Extrapolated to {FULL_SCALE:,} blocks: {gib(full):.1f} GiB peak in the launcher.",
            ""]
  markdown = "\n".join(lines)
  print(markdown)
  bench_utils.write_results("index_builder_memory", rows + [
      {"fit_constant_bytes": a, "fit_bytes_per_block": b, "full_scale_blocks": FULL_SCALE,
       "full_scale_peak_bytes": full}], markdown, _RESULTS_DIR.value)


if __name__ == "__main__":
  app.run(main)
