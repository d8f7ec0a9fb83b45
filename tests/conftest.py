"""Shared test set-up: quiet TensorFlow, CPU only, deterministic seeds; the order of the files."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# One intra-op thread per test process (subprocesses inherit it): the suite runs three test
# processes on two cores, where a second thread per op only waits for a core; and a test's
# numbers then do not depend on the machine's core count.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

# The longest test files, longest first. pytest-xdist's workers (Makefile `test`: --dist
# loadfile --no-loadscope-reorder) take whole files in collection order, so the long ones start
# first and the short ones fill in at the end, instead of one worker running a long file alone
# while the other has finished.
LONGEST = ("ablations_seed0_test.py", "ablations_seed1_test.py", "ablations_seed2_test.py",
           "demo_test.py", "multi_worker_training_test.py", "multi_worker_test.py",
           "notebooks_test.py", "qa_end_to_end_test.py")
# After the demo's chain (tests/demo_run.py) has had time to finish: it reads the chain's run.
AFTER_SLOW = ("demo_bench_test.py",)
# After the seed files that run the seeds it reads (tests/ablation_seeds.py).
LAST = ("ablations_small_test.py",)


def pytest_collection_modifyitems(items):
  """Files in the order: `LONGEST`, the other files with `slow` tests, `AFTER_SLOW`, the rest,
  `LAST`; each file's tests keep their order."""
  slow_files = {item.path.name for item in items if item.get_closest_marker("slow")}

  def rank(item):
    name = item.path.name
    if name in LONGEST:
      return LONGEST.index(name)
    if name in LAST:
      return len(LONGEST) + 3
    if name in AFTER_SLOW:
      return len(LONGEST) + 1
    return len(LONGEST) + (0 if name in slow_files else 2)

  items.sort(key=rank)  # stable
