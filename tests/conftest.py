"""Shared test set-up: quiet TensorFlow, CPU only, deterministic seeds; the order of the files."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# One intra-op thread per test process (subprocesses inherit it): the suite runs three test
# processes on two cores, where a second thread per op only waits for a core; and a test's
# numbers then do not depend on the machine's core count.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

# The test files that cost the most CPU, most first (per-file CPU-seconds under the AVX2 cap:
# bench/results/suite_files_avx2.md). pytest-xdist's workers (Makefile `test`: --dist loadfile
# --no-loadscope-reorder) take whole files in collection order, so the long ones start first and
# the short ones, in collection order after them, fill in at the end instead of one worker
# running a long file alone while the others have finished. `demo_bench_test.py` reads the
# demo's chain (tests/demo_run.py) and stands late enough for that chain to have finished.
ORDER = ("ablations_seed0_test.py", "ablations_seed1_test.py", "ablations_seed2_test.py",
         "qa_end_to_end_test.py", "multi_worker_training_test.py", "demo_test.py",
         "real_data_chain_test.py", "notebooks_test.py", "qa_finetune_test.py",
         "xla_steps_test.py", "qa_doc_tower_test.py", "probe_edit_test.py",
         "pretraining_test.py", "multi_worker_test.py", "released_assets_test.py",
         "demo_bench_test.py", "hub_reusable_test.py", "pretraining_binary_test.py",
         "experiments_test.py", "pipelines_end_to_end_test.py", "async_refresh_test.py",
         "pipelines_build_index_test.py", "checked_resume_test.py", "step0_fidelity_test.py",
         "mlm_warmup_test.py", "models_test.py", "pipelines_dask_test.py", "probe_test.py",
         "ask_test.py", "flag_groups_test.py", "serve_api_test.py")
# After the seed files that run the seeds it reads (tests/ablation_seeds.py).
LAST = ("ablations_small_test.py",)


def pytest_collection_modifyitems(items):
  """Files in the order: `ORDER`, the rest in collection order, `LAST`; each file's tests keep
  their order."""

  def rank(item):
    name = item.path.name
    if name in ORDER:
      return ORDER.index(name)
    return len(ORDER) + (1 if name in LAST else 0)

  items.sort(key=rank)  # stable
