"""The tests whose outcome could depend on relative speed, run on a host made slow: a table.

    python tools/slow_hosts.py                                   # 3 runs of each, 3 conditions
    python tools/slow_hosts.py --runs=1 --conditions=busy --files=tests/serve_api_test.py
    python tools/slow_hosts.py --output=bench/results/slow_hosts.md

Each file (or its timing-dependent tests, `TIMING_TESTS`) runs `--runs` times under each
condition: natively; with oneDNN capped at AVX2 (float32, the slowest CPU kind,
`cpu_kinds.KINDS`); and with two busy-loop processes (`python -c "while True: pass"`) on the
cores beside it. Every test listed waits for the event it asserts (a published index, a
checkpoint on disk, a log line, a full batch), so every cell must read runs/runs.
"""
import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Tuple

import cpu_kinds

# file -> the pytest -k expression of its tests that race another process or thread ("": all).
TIMING_TESTS = {
    "tests/multi_worker_training_test.py": "pretraining",
    "tests/multi_worker_test.py": "kill_9",
    "tests/pretraining_binary_test.py": "kill_9",
    "tests/qa_doc_tower_test.py": "async_refresh",
    "tests/async_refresh_test.py": "",
    "tests/index_builder_supervision_test.py": "",
    "tests/index_publishing_test.py": "killed",
    "tests/pipelines_build_index_test.py": "killed",
    "tests/serve_api_test.py": "concurrent or batcher or binary",
}
CONDITIONS = {
    "native": "this host as it is",
    "avx2": "oneDNN capped at AVX2 (float32)",
    "busy": "two busy-loop processes beside the tests",
}


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
  """`count` processes spinning on the cores while the block runs."""
  loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
  try:
    yield
  finally:
    for loop in loops:
      loop.kill()
      loop.wait()


def run(condition: str, file: str, attempt: int, directory: str) -> Tuple[int, int, float]:
  """(passed, failed, seconds) of one run of `file`'s timing tests under `condition`."""
  env = cpu_kinds.kind_env("avx2") if condition == "avx2" else dict(os.environ)
  selection = [file] + (["-k", TIMING_TESTS[file]] if TIMING_TESTS.get(file) else [])
  name = f"{condition}-{os.path.basename(file)[:-3]}-{attempt}"
  with busy_loops(2 if condition == "busy" else 0):
    outcomes, _, seconds = cpu_kinds.run_pytest(name, env, selection, 1, directory)
  failed = sum(outcome in ("failed", "error") for outcome in outcomes.values())
  return sum(outcome == "passed" for outcome in outcomes.values()), failed, seconds


def table(results: Dict[Tuple[str, str], List[Tuple[int, int, float]]], files: List[str],
          conditions: List[str]) -> str:
  """Markdown: per file and condition, the runs that passed whole, and their minutes."""
  lines = ["| file (tests) | " + " | ".join(conditions) + " |",
           "|---|" + "---|" * len(conditions)]
  for file in files:
    cells = []
    for condition in conditions:
      runs = results[(file, condition)]
      green = sum(failed == 0 and passed > 0 for passed, failed, _ in runs)
      minutes = sum(seconds for _, _, seconds in runs) / 60
      cells.append(f"{green}/{len(runs)} green ({runs[0][0]} tests, {minutes:.1f} min)")
    lines.append(f"| {file} (-k {TIMING_TESTS.get(file) or 'all'}) | " + " | ".join(cells) + " |")
  lines += ["", "Conditions: " + "; ".join(f"{c} = {CONDITIONS[c]}" for c in conditions) + "."]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--files", default=",".join(TIMING_TESTS), help="Comma-separated files.")
  parser.add_argument("--conditions", default=",".join(CONDITIONS),
                      help=f"Comma-separated subset of {', '.join(CONDITIONS)}.")
  parser.add_argument("--runs", type=int, default=3, help="Runs of each file per condition.")
  parser.add_argument("--output", default="", help="Also write the table to this file.")
  args = parser.parse_args(argv)
  files, conditions = args.files.split(","), args.conditions.split(",")
  unknown = [c for c in conditions if c not in CONDITIONS]
  if unknown:
    parser.error(f"unknown conditions {unknown}; choose from {', '.join(CONDITIONS)}")
  sys.path.insert(0, cpu_kinds.ROOT)
  from realm_tf.models import precision  # pylint: disable=import-outside-toplevel
  directory = tempfile.mkdtemp(prefix="slow_hosts_")
  results = {}
  for file in files:
    for condition in conditions:
      results[(file, condition)] = [run(condition, file, attempt, directory)
                                    for attempt in range(args.runs)]
      print(f"{file} {condition}: {results[(file, condition)]} (logs {directory})", flush=True)
  report = (f"On {precision.cpu_model()} ({os.cpu_count()} cores), {args.runs} run(s) each.\n\n"
            + table(results, files, conditions))
  print(report)
  if args.output:
    with open(args.output, "w", encoding="utf-8") as f:
      f.write(report)
  return 1 if any(failed or not passed for runs in results.values()
                  for passed, failed, _ in runs) else 0


if __name__ == "__main__":
  sys.exit(main())
