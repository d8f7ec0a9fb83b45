"""The index builder's memory against the number of blocks, and the sharded index's recall.

  python bench/index_builder_memory.py --num_blocks=100000,300000,1000000 --shards=4,8

For each N and S: synthetic clustered float32 [N, 128] embeddings (Gaussians around
`--centres` unit-norm centres, normalised) are written to a `.npy`; a fresh process maps it and
publishes a ScaNN index of S shards of ceil(N / S) rows (`index_publisher.publish` of
`index_builder.save_index`), reporting its resident memory before, its peak, and the peak of
each phase (a shard's rows to float32, ScaNN's build, saving, verifying; VmHWM reset at each
phase). The parent loads the index and measures recall@10 against exact float64 search on
`--num_queries` queries near the centres. Writes bench/results/index_builder_memory.{md,json}.
"""
import math
import multiprocessing
import os
import re
import sys
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position

_NUM_BLOCKS = flags.DEFINE_list("num_blocks", ["100000", "300000", "1000000"],
                                "Corpus sizes N to measure.")
_SHARDS = flags.DEFINE_list("shards", ["4", "8"],
                            "Index shards per corpus (shard size ceil(N/S)); each is measured.")
_DIM = flags.DEFINE_integer("dim", 128, "Embedding dimension D.")
_CENTRES = flags.DEFINE_integer("centres", 2000, "Mixture components of the embeddings.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 1000, "Queries for recall@10.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", "bench/results", "Where results go.")

_KIB = 1024
_CHUNK = 100_000


def _rss_bytes() -> int:
  with open("/proc/self/statm", encoding="ascii") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _clustered(rng, centres, n, dim):
  """n unit-norm points around random centres (noise of norm ~0.5 before normalising)."""
  points = centres[rng.integers(0, len(centres), n)] + (
      0.5 / math.sqrt(dim)) * rng.standard_normal((n, dim))
  return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def write_embeddings(path: str, num_blocks: int, dim: int, num_centres: int, num_queries: int):
  """Writes clustered float32 [N, D] embeddings to `path` (.npy); returns queries [Q, D]."""
  rng = np.random.default_rng(0)
  centres = rng.standard_normal((num_centres, dim))
  centres /= np.linalg.norm(centres, axis=1, keepdims=True)
  out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(num_blocks, dim))
  for begin in range(0, num_blocks, _CHUNK):
    out[begin:begin + _CHUNK] = _clustered(rng, centres, min(_CHUNK, num_blocks - begin), dim)
  out.flush()
  del out
  return _clustered(rng, centres, num_queries, dim)


def _peak_bytes() -> int:
  """This process's peak resident memory since exec or the last `_reset_peak` (VmHWM; unlike
  `ru_maxrss` it does not carry over the parent's peak through fork + exec)."""
  with open("/proc/self/status", encoding="ascii") as f:
    return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * _KIB


def _reset_peak() -> None:
  with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
    f.write("5")  # resets VmHWM to the current resident memory


class _PhasePeaks:
  """Exact peak resident memory per phase: the high-water mark is read and reset whenever the
  phase changes."""

  def __init__(self):
    self.peaks, self.phase = {}, "other"
    _reset_peak()

  def enter(self, phase):
    self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), _peak_bytes())
    _reset_peak()
    self.phase = phase

  def wrap(self, module, name, phase):
    inner = getattr(module, name)

    def wrapped(*args, **kwargs):
      previous = self.phase
      self.enter(phase)
      try:
        return inner(*args, **kwargs)
      finally:
        self.enter(previous)
    setattr(module, name, wrapped)


def _builder(path, index_root, shard_size, queue) -> None:
  """The measured process: publish a sharded ScaNN index of the memory-mapped embeddings."""
  # pylint: disable=g-import-not-at-top
  from realm_tf.mips import index_builder
  from realm_tf.mips import index_loading
  from realm_tf.mips import index_publisher
  from realm_tf.mips import scann_index
  before = _rss_bytes()
  phases = _PhasePeaks()
  phases.wrap(index_builder, "_shard_rows", "rows to float32")
  phases.wrap(scann_index.ScannIndex, "build", "ScaNN build")
  phases.wrap(scann_index.ScannIndex, "save", "save")
  phases.wrap(index_loading, "check_index", "verify")
  embeddings = np.load(path, mmap_mode="r")
  sharding = index_builder.Sharding(shard_size=shard_size)
  start = time.perf_counter()
  published = index_publisher.publish(
      lambda d: index_builder.save_index(embeddings, d, "scann", sharding=sharding), index_root,
      "step-00000001")
  seconds = time.perf_counter() - start
  phases.enter("other")
  size = sum(os.path.getsize(os.path.join(root, f))
             for root, _, files in os.walk(published) for f in files)
  peak = max(phases.peaks.values())
  queue.put({"rss_before": before, "peak_rss": peak, "seconds": seconds, "index_bytes": size,
             "phase_peaks": phases.peaks})


def _exact_top10(path, queries):
  embeddings = np.load(path, mmap_mode="r")
  scores, ids = [], []
  for begin in range(0, len(embeddings), _CHUNK):
    chunk = queries.astype(np.float64) @ embeddings[begin:begin + _CHUNK].astype(np.float64).T
    top = np.argsort(-chunk, axis=1)[:, :10]
    scores.append(np.take_along_axis(chunk, top, axis=1))
    ids.append(top + begin)
  scores, ids = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
  return np.take_along_axis(ids, np.argsort(-scores, axis=1)[:, :10], axis=1)


def measure(num_blocks: int, dim: int, shards: int, centres: int, num_queries: int):
  """One row: the builder's peak resident memory, and recall@10 of what it published."""
  shard_size = -(-num_blocks // shards)
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "embeddings.npy")
    queries = write_embeddings(path, num_blocks, dim, centres, num_queries)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_builder, args=(path, os.path.join(tmp, "index"),
                                                     shard_size, queue))
    process.start()
    row = queue.get()
    process.join()
    if process.exitcode:
      raise RuntimeError(f"the builder for N={num_blocks} exited with {process.exitcode}")
    from realm_tf.mips import index_publisher  # pylint: disable=g-import-not-at-top
    _, index, _ = index_publisher.load_latest(os.path.join(tmp, "index"))
    _, ids = index.search(queries, 10)
    true_ids = _exact_top10(path, queries)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.numpy(), true_ids)]))
    num_shards = len(index.shards) if hasattr(index, "shards") else 1
    del index
  embeddings_bytes = num_blocks * dim * 4
  return {"num_blocks": num_blocks, "dim": dim, "shard_size": shard_size,
          "num_shards": num_shards, **row, "recall_at_10": recall,
          "peak_over_embeddings": row["peak_rss"] / embeddings_bytes,
          "growth_over_embeddings": (row["peak_rss"] - row["rss_before"]) / embeddings_bytes}


def main(argv):
  del argv
  machine = bench_utils.machine_line()
  print(machine, flush=True)
  rows = []
  for num_blocks in sorted(int(n) for n in _NUM_BLOCKS.value):
    for shards in sorted(int(s) for s in _SHARDS.value):
      rows.append(measure(num_blocks, _DIM.value, shards, _CENTRES.value, _NUM_QUERIES.value))
      print(rows[-1], flush=True)
  mib = lambda x: f"{x / 2**20:.0f}"
  phases = ["rows to float32", "ScaNN build", "save", "verify"]
  lines = [
      "# Index builder: peak memory of the sharded build, and recall", "", machine, "",
      f"ScaNN, default settings per shard, D = {_DIM.value}, S shards per corpus, clustered "
      f"float32 embeddings ({_CENTRES.value} centres) memory-mapped from a .npy file; "
      f"recall@10 vs exact on {_NUM_QUERIES.value} queries.", "",
      "| blocks N | shards × rows | embeddings (MiB) | RSS before (MiB) | peak RSS (MiB) | "
      "peak / embeddings | (peak - before) / embeddings | "
      + " | ".join(f"peak in {p} (MiB)" for p in phases) + " | seconds | index on disk (MiB) "
      "| recall@10 |", "|---" * (10 + len(phases)) + "|"]
  for r in rows:
    peaks = [mib(r["phase_peaks"].get(p, 0)) for p in phases]
    lines.append(
        f"| {r['num_blocks']:,} | {r['num_shards']} × {r['shard_size']:,} | "
        f"{mib(r['num_blocks'] * r['dim'] * 4)} | {mib(r['rss_before'])} | "
        f"{mib(r['peak_rss'])} | {r['peak_over_embeddings']:.2f} | "
        f"{r['growth_over_embeddings']:.2f} | " + " | ".join(peaks) +
        f" | {r['seconds']:.1f} | {mib(r['index_bytes'])} | {r['recall_at_10']:.3f} |")
  markdown = "\n".join(lines + [""])
  print(markdown)
  bench_utils.write_results("index_builder_memory", rows, markdown, _RESULTS_DIR.value)


if __name__ == "__main__":
  app.run(main)
