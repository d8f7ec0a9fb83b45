"""Answers in bfloat16 against float32, paired: exact match, recall@5 and the same top answer.

Loads one QA model twice (`Asker(compute_dtype=...)`: the query tower and the reader in each
precision, the same index), evaluates both on the same questions (`qa.evaluate_lib`) and
compares them question by question. On a CPU without bfloat16 units TensorFlow runs the
bfloat16 matmuls in software: the answers are those of a bfloat16 kind, the seconds are not.

    python bench/answer_precision.py --model_dir=results/demo/qa \\
        --data=results/demo/questions/dev.jsonl --max_examples=200

Results: bench/results/<--name>.{json,md}.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.qa import datasets  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.qa import evaluate_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.qa.ask_lib import Asker  # pylint: disable=g-import-not-at-top,wrong-import-position


def evaluate(model_dir, examples, compute_dtype, k, batch_size):
  asker = Asker(model_dir, k=k, compute_dtype=compute_dtype)
  start = time.perf_counter()
  result = evaluate_lib.evaluate(asker.system, examples,
                                 evaluate_lib.EvalConfig(recall_ks=(5,), batch_size=batch_size))
  seconds = time.perf_counter() - start
  correct = np.array([r["exact_match"] for r in result.records])
  found = np.array([any(b["has_answer"] for b in r["top_blocks"][:5]) for r in result.records])
  return {"compute_dtype": compute_dtype, "seconds": seconds, **result.metrics}, (
      [r["answer"] for r in result.records], correct, found)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--data", required=True)
  parser.add_argument("--dataset", default="nq")
  parser.add_argument("--max_examples", type=int, default=0)
  parser.add_argument("--k", type=int, default=5)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--name", default="answer_precision")
  args = parser.parse_args()
  print(bench_utils.machine_line(), flush=True)
  examples = datasets.load_examples(args.data, datasets.dataset_of(args.data, args.dataset))
  examples = examples[:args.max_examples or None]
  rows, outcomes = [], []
  for dtype in ("float32", "bfloat16"):
    row, outcome = evaluate(args.model_dir, examples, dtype, args.k, args.batch_size)
    rows.append(row)
    outcomes.append(outcome)
    print(row, flush=True)
  (answers32, em32, found32), (answers16, em16, found16) = outcomes
  paired = {"mode": "paired", "questions": len(examples),
            "same_top_answer": float(np.mean([a == b for a, b in zip(answers32, answers16)])),
            "em_changed": int(np.sum(em32 != em16)), "em_gained": int(np.sum(em16 & ~em32)),
            "em_lost": int(np.sum(em32 & ~em16)),
            "recall5_changed": int(np.sum(found32 != found16)),
            "delta_exact_match": float(em16.mean() - em32.mean()),
            "delta_recall@5": float(found16.mean() - found32.mean()),
            "load_average": os.getloadavg()[0]}
  markdown = (f"{bench_utils.machine_line()}\n\n`python bench/answer_precision.py "
              f"--model_dir={args.model_dir} --data={args.data} "
              f"--max_examples={args.max_examples}`\n\n" + bench_utils.markdown_table(
                  rows, ["compute_dtype", "num_questions", "exact_match", "recall@5",
                         "seconds"]) + "\n\n" + bench_utils.markdown_table(
                  [paired], list(paired)))
  print(markdown)
  print(bench_utils.write_results(args.name, rows + [paired], markdown))


if __name__ == "__main__":
  main()
