r"""The suite's time on a fresh clone, as CI runs it: `CI=true bash .ci/run`, install included.

    .venv/bin/python bench/suite_time.py --name=suite_fresh_clone     # ~30 min on 2 cores

Clones HEAD into a temporary directory and runs `.ci/run` there (install, then `make test`)
with pytest's JUnit XML; writes `bench/results/<name>.{json,md}`: total, install and pytest
minutes, the outcome counts, the CPU-seconds of the whole run, the load average before it, and
each test file's seconds (the sum of its tests', on the worker that ran it), longest first,
against the goal of 25 minutes in all and 6 per file. Nothing else should run beside it.
"""
import collections
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench import bench_utils  # pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL_MINUTES, FILE_LIMIT_MINUTES = 25, 6
_NAME = flags.DEFINE_string("name", "suite_fresh_clone", "Result file name under bench/results/.")


def run_ci(clone: str, junit: str, log_path: str) -> Tuple[int, float, float, float]:
  """(exit status, install seconds, pytest seconds, CPU-seconds) of `.ci/run` in `clone`; the
  install ends where `make test` prints its machine line ("CPU: ...")."""
  env = dict(os.environ, CI="true", PYTEST_ADDOPTS=f"--junitxml={junit}")
  env.pop("VIRTUAL_ENV", None)
  started, tests_started = time.monotonic(), None
  with open(log_path, "w", encoding="utf-8") as log:
    process = subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for line in process.stdout:
      log.write(line)
      if tests_started is None and line.startswith("CPU: "):
        tests_started = time.monotonic()
    status = process.wait()
  ended = time.monotonic()
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  tests_started = tests_started or ended
  return status, tests_started - started, ended - tests_started, usage.ru_utime + usage.ru_stime


def per_file(junit: str) -> Tuple[Dict[str, int], List[Dict[str, object]]]:
  """({outcome: tests}, [{"file", "tests", "seconds"}] longest first) from the JUnit XML."""
  outcomes, seconds, tests = collections.Counter(), collections.Counter(), collections.Counter()
  for case in ET.parse(junit).iter("testcase"):
    name = "tests/" + case.get("classname", "").split(".")[1] + ".py"
    seconds[name] += float(case.get("time", 0))
    tests[name] += 1
    kinds = {child.tag for child in case}
    outcomes["failed" if kinds & {"failure", "error"} else
             "skipped" if "skipped" in kinds else "passed"] += 1
  rows = [{"file": f, "tests": tests[f], "seconds": round(s, 1)} for f, s in seconds.most_common()]
  return dict(outcomes), rows


def main(argv):
  del argv
  commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                   text=True).strip()
  load = os.getloadavg()[0]
  with tempfile.TemporaryDirectory(prefix="suite_time_") as directory:
    clone, junit = os.path.join(directory, "clone"), os.path.join(directory, "junit.xml")
    subprocess.check_call(["git", "clone", "-q", ROOT, clone])
    log_path = os.path.join(tempfile.gettempdir(), f"{_NAME.value}.log")
    print(f"fresh clone of {commit} in {clone}, output in {log_path}", flush=True)
    status, install, tests, cpu = run_ci(clone, junit, log_path)
    outcomes, files = per_file(junit) if os.path.exists(junit) else ({}, [])
  total = (install + tests) / 60
  summary = {"commit": commit, "exit_status": status, "minutes": round(total, 1),
             "install_minutes": round(install / 60, 1), "pytest_minutes": round(tests / 60, 1),
             "cpu_seconds": round(cpu), "load_before": load, **outcomes}
  over = [r["file"] for r in files if r["seconds"] > FILE_LIMIT_MINUTES * 60]
  markdown = (f"# `CI=true bash .ci/run` on a fresh clone of {commit}\n\n"
              f"{bench_utils.machine_line()}\n\n"
              f"**{total:.1f} minutes** in all (goal {GOAL_MINUTES}): install "
              f"{summary['install_minutes']}, pytest {summary['pytest_minutes']}; exit status "
              f"{status}; {outcomes}; {cpu:.0f} CPU-seconds; load average {load:.2f} before it. "
              f"Files over {FILE_LIMIT_MINUTES} minutes: {over or 'none'}.\n\n"
              + bench_utils.markdown_table(files, ["file", "tests", "seconds"]))
  print(markdown)
  bench_utils.write_results(_NAME.value, [summary] + files, markdown,
                            os.path.join(ROOT, "bench", "results"))
  return 0 if status == 0 else 1


if __name__ == "__main__":
  app.run(main)
