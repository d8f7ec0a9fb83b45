"""The CPU-sensitive tests under each CPU kind, emulated on this machine: a pass/fail table.

    python tools/cpu_kinds.py                       # every kind, the CPU-sensitive files
    python tools/cpu_kinds.py --kinds=avx2,onednn_off --files=tests/probe_edit_test.py
    python tools/cpu_kinds.py --output=bench/results/cpu_kinds.md

Tiny models trained for a few hundred steps follow another trajectory on each CPU kind (other
oneDNN kernels, and `--compute_dtype=auto` is bfloat16 only with bfloat16 units).
`ONEDNN_MAX_CPU_ISA` caps oneDNN's kernels and `auto` follows it, so a machine with AMX stands
in for every kind; `TF_ENABLE_ONEDNN_OPTS=0` is TensorFlow without oneDNN. float32 on the
bfloat16 kinds is the VNNI row (the same AVX-512 kernels). Each kind runs the files with pytest
(two xdist workers); the table gives each test's outcome and figures (`record_property`) per kind.
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# kind -> (what it stands for, the environment that emulates it)
KINDS = {
    "avx2": ("AMD EPYC Zen 3 (AVX2), float32", {"ONEDNN_MAX_CPU_ISA": "AVX2"}),
    "avx512_core_vnni": ("Intel Xeon, AVX-512 VNNI without bfloat16 (Cascade Lake), float32",
                         {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}),
    "avx512_core_bf16": ("AMD EPYC Zen 4 (AVX512-BF16), bfloat16",
                         {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}),
    "avx512_core_amx": ("Intel Xeon with AMX, bfloat16", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}),
    "onednn_off": ("TensorFlow without oneDNN (Eigen), float32", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
}
# The tests whose outcome depends on float rounding: learning claims of tiny models, equalities
# between runs, tolerances against a reference.
CPU_SENSITIVE = (
    "tests/ablations_seed0_test.py", "tests/ablations_seed1_test.py",
    "tests/ablations_seed2_test.py", "tests/ablations_small_test.py",
    "tests/probe_edit_test.py", "tests/probe_test.py", "tests/pretraining_test.py",
    "tests/qa_finetune_test.py", "tests/qa_end_to_end_test.py",
    "tests/multi_worker_training_test.py", "tests/real_data_chain_test.py",
    "tests/demo_test.py", "tests/precision_test.py", "tests/reference_parity_test.py",
    "tests/step0_fidelity_test.py")


def kind_env(kind: str) -> Dict[str, str]:
  """This process's environment with only `kind`'s oneDNN settings."""
  env = dict(os.environ, **KINDS[kind][1])
  for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "TF_ENABLE_ONEDNN_OPTS"):
    if name not in KINDS[kind][1]:
      env.pop(name, None)
  return env


def run_pytest(name: str, env: Dict[str, str], files: List[str], workers: int, directory: str
               ) -> Tuple[Dict[str, str], Dict[str, Dict[str, str]], float]:
  """Runs pytest on `files` (paths or node ids) in `env`, logging to `<directory>/<name>.log`;
  returns ({test: outcome}, {test: {property: value}}, seconds)."""
  junit = os.path.join(directory, f"{name}.xml")
  command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--junitxml={junit}", "-o", "junit_family=xunit1", *files]
  if workers > 1:
    command += ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"]
  start = time.perf_counter()
  with open(os.path.join(directory, f"{name}.log"), "w", encoding="utf-8") as log:
    subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
  seconds = time.perf_counter() - start
  outcomes, properties = {}, {}
  if not os.path.exists(junit):
    return {"(pytest did not run)": "error"}, {}, seconds
  for case in ElementTree.parse(junit).getroot().iter("testcase"):
    test = f"{case.get('classname')}::{case.get('name')}"  # a class per seed file
    tags = {child.tag for child in case}
    outcomes[test] = ("failed" if tags & {"failure", "error"} else
                      "skipped" if "skipped" in tags else "passed")
    properties[test] = {p.get("name"): p.get("value") for p in case.iter("property")}
  return outcomes, properties, seconds


def table(kinds: List[str], results: Dict[str, tuple]) -> str:
  """The markdown report: outcome per test and kind, the recorded figures, the times."""
  tests = sorted({test for kind in kinds for test in results[kind][0]})
  lines = ["| test | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
  for test in tests:
    lines.append(f"| {test} | " + " | ".join(results[kind][0].get(test, "-") for kind in kinds)
                 + " |")
  totals = collections.Counter()
  for kind in kinds:
    totals.update((kind, outcome) for outcome in results[kind][0].values())
  lines.append("| **passed / failed** | " + " | ".join(
      f"{totals[(kind, 'passed')]} / {totals[(kind, 'failed')]}" for kind in kinds) + " |")
  lines.append("| minutes | " + " | ".join(f"{results[kind][2] / 60:.1f}" for kind in kinds)
               + " |")
  figures = sorted({(test, name) for kind in kinds for test, values in results[kind][1].items()
                    for name in values})
  if figures:
    lines += ["", "| figure | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for test, name in figures:
      lines.append(f"| {test.split('.')[-1]}: {name} | " + " | ".join(
          results[kind][1].get(test, {}).get(name, "-") for kind in kinds) + " |")
  lines += ["", "Kinds: " + "; ".join(f"{kind} = {KINDS[kind][0]}" for kind in kinds) + "."]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--kinds", default=",".join(KINDS),
                      help=f"Comma-separated subset of {', '.join(KINDS)}.")
  parser.add_argument("--files", default=",".join(CPU_SENSITIVE),
                      help="Comma-separated test files (default: the CPU-sensitive ones).")
  parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per kind.")
  parser.add_argument("--output", default="", help="Also write the table to this file.")
  args = parser.parse_args(argv)
  kinds = args.kinds.split(",")
  unknown = [kind for kind in kinds if kind not in KINDS]
  if unknown:
    parser.error(f"unknown kinds {unknown}; choose from {', '.join(KINDS)}")
  sys.path.insert(0, ROOT)
  from realm_tf.models import precision  # pylint: disable=import-outside-toplevel
  header = f"On {precision.cpu_model()} ({os.cpu_count()} cores), emulating each kind.\n\n"
  directory = tempfile.mkdtemp(prefix="cpu_kinds_")
  results = {}
  for kind in kinds:
    results[kind] = run_pytest(kind, kind_env(kind), args.files.split(","), args.workers,
                               directory)
    failed = [test for test, outcome in results[kind][0].items() if outcome != "passed"
              and outcome != "skipped"]
    print(f"{kind}: {len(results[kind][0]) - len(failed)} passed or skipped, {len(failed)} "
          f"failed, {results[kind][2] / 60:.1f} min (log {directory}/{kind}.log)", flush=True)
  report = header + table(kinds, results)
  print(report)
  if args.output:
    with open(args.output, "w", encoding="utf-8") as f:
      f.write(report)
  return 1 if any(outcome == "failed" for kind in kinds
                  for outcome in results[kind][0].values()) else 0


if __name__ == "__main__":
  sys.exit(main())
