"""Where one batch of answering goes: the query tower, the index search, the reader's read.

Times each stage of `RetrieveAndRead.answer` (median over batches) at batch sizes 1 and 16,
and the reader's executed FLOPs (`serve_bench.flops_per_question`'s count) per second against
the float32 matmul peak measured in the same run.

    python bench/answer_profile.py --model_dir=results/demo/qa \\
        --questions_file=results/demo/questions/dev.jsonl
"""
import argparse
import os
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from bench import serve_bench  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.qa import ask_lib  # pylint: disable=g-import-not-at-top,wrong-import-position


def stage_times(system, batch):
  """Seconds of the query tower + search, gathering the blocks, and the read, for `batch`."""
  begin = time.perf_counter()
  _, query_ids, scores, rows = system._search(batch, system.k)  # pylint: disable=protected-access
  searched = time.perf_counter()
  titles, texts = system.gather_blocks(rows)
  gathered = time.perf_counter()
  out = system._reader(query_ids)(  # pylint: disable=protected-access
      query_ids, tf.constant(titles.astype(str)), tf.constant(texts.astype(str)),
      tf.constant(scores, tf.float32), tf.constant(rows >= 0))
  out["answer"].numpy()
  return searched - begin, gathered - searched, time.perf_counter() - gathered


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--questions_file", required=True)
  parser.add_argument("--questions", type=int, default=48)
  parser.add_argument("--compute_dtype", default="float32")
  parser.add_argument("--name", default="answer_profile")
  args = parser.parse_args()
  print(bench_utils.machine_line(), flush=True)
  questions = serve_bench.questions_of(args.questions_file, args.questions)
  asker = ask_lib.Asker(args.model_dir, compute_dtype=args.compute_dtype)
  rows = []
  for batch_size in (1, 16):
    system = asker.model.system(k=asker.system.k, batch_size=batch_size)
    batches = [questions[i:i + batch_size] for i in range(0, len(questions), batch_size)]
    stage_times(system, batches[0])  # traces
    times = np.array([stage_times(system, b) for b in batches]) / batch_size
    flops = serve_bench.flops_per_question(asker, questions[:16])["trimmed"]
    read = float(np.median(times[:, 2]))
    rows.append({"batch_size": batch_size, "query_and_search_ms": 1e3 * np.median(times[:, 0]),
                 "gather_ms": 1e3 * np.median(times[:, 1]), "read_ms": 1e3 * read,
                 "gflop_per_question": flops / 1e9, "gflop_per_s": flops / read / 1e9})
    print(rows[-1], flush=True)
  peak = bench_utils.machine_peaks(remeasure=True)["float32"]
  for row in rows:
    row["of_fp32_peak"] = row["gflop_per_s"] * 1e9 / peak
  rows.append({"batch_size": "load_average", "query_and_search_ms": os.getloadavg()[0]})
  markdown = (f"{bench_utils.machine_line()}\n\n`python bench/answer_profile.py "
              f"--model_dir={args.model_dir}`, per question, medians over batches\n\n" +
              bench_utils.markdown_table(rows, list(rows[0])))
  print(markdown)
  print(bench_utils.write_results(args.name, rows, markdown))


if __name__ == "__main__":
  main()
