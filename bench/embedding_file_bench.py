"""Block embeddings on disk (`retrieval.embedding_file`): size, resident memory and the
fine-tuning step's host gather, per storage dtype.

For each of float32, bfloat16 and float16, writes N random [N, D] embeddings through
`embedding_file.create` (in blocks, as `embed_blocks(out=...)` does), opens the file
memory-mapped and gathers the rows of the retriever loss (B questions x K rows, random, as
`open_qa_batches.BatchPreparer` does each step), and reports the file size, the process's
resident memory (VmRSS) after opening and after the gathers, and the seconds per gather
(the first from a dropped page cache where the OS allows it, else from wherever the pages
are).

    python bench/embedding_file_bench.py --num_blocks=1000000
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top
from realm_tf.retrieval import embedding_file  # pylint: disable=g-import-not-at-top

GIB = 1 << 30


def _rss() -> int:
  """The process's resident memory in bytes."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  return 0


def measure(directory: str, storage_dtype: str, args) -> dict:
  """One storage dtype's figures."""
  path = os.path.join(directory, f"{storage_dtype}.npy")
  rng = np.random.default_rng(0)
  out = embedding_file.create(path, args.num_blocks, args.dim, storage_dtype)
  for start in range(0, args.num_blocks, 65536):
    rows = min(65536, args.num_blocks - start)
    out[start:start + rows] = rng.standard_normal([rows, args.dim], np.float32)
  out.flush()
  del out
  rss_before = _rss()
  embeddings = embedding_file.open_embeddings(path, storage_dtype, args.num_blocks, args.dim)
  rss_open = _rss()
  seconds = []
  for _ in range(args.gathers):
    rows = rng.integers(0, args.num_blocks, [args.batch_size, args.retrieve_k])
    start = time.perf_counter()
    gathered = embedding_file.gather(embeddings, rows)
    seconds.append(time.perf_counter() - start)
  assert gathered.shape == (args.batch_size, args.retrieve_k, args.dim)
  row = {"storage_dtype": storage_dtype, "num_blocks": args.num_blocks, "dim": args.dim,
         "file_gib": os.path.getsize(path) / GIB,
         "bytes_per_block": embedding_file.bytes_per_block(args.dim, storage_dtype),
         "rss_open_delta_gib": (rss_open - rss_before) / GIB,
         "rss_after_gathers_delta_gib": (_rss() - rss_before) / GIB,
         "first_gather_s": seconds[0], "median_gather_s": float(np.median(seconds[1:]))}
  del embeddings
  os.remove(path)
  return row


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_blocks", type=int, default=1_000_000, help="N.")
  parser.add_argument("--dim", type=int, default=128, help="D.")
  parser.add_argument("--batch_size", type=int, default=16, help="B questions per step.")
  parser.add_argument("--retrieve_k", type=int, default=5000, help="K rows per question.")
  parser.add_argument("--gathers", type=int, default=11, help="Gathers measured.")
  parser.add_argument("--directory", default="", help="Where the files go (default: a "
                      "temporary directory).")
  args = parser.parse_args(argv)
  print(bench_utils.machine_line(), flush=True)
  with tempfile.TemporaryDirectory(dir=args.directory or None) as directory:
    rows = [measure(directory, dtype, args) for dtype in embedding_file.STORAGE_DTYPES]
  header = ("| storage | file GiB | bytes/block | RSS after open | RSS after gathers | "
            "first gather s | median gather s |\n|---|---|---|---|---|---|---|\n")
  markdown = header + "".join(
      f"| {r['storage_dtype']} | {r['file_gib']:.3f} | {r['bytes_per_block']} | "
      f"{r['rss_open_delta_gib']:.3f} | {r['rss_after_gathers_delta_gib']:.3f} | "
      f"{r['first_gather_s']:.3f} | {r['median_gather_s']:.3f} |\n" for r in rows)
  print(markdown)
  print(bench_utils.write_results("embedding_file", rows, markdown))


if __name__ == "__main__":
  main()
