"""Knowledge-world ablations: REALM Table 2 and Figure 4 with tiny BERTs, over seeds.

  python bench/ablations.py                       # the full table, seeds 0-2
  python bench/ablations.py --size=small          # the preset `make test` runs
  python bench/ablations.py --seeds=0,1,2,3,4 --processes=2

Each seed runs in its own process (`--processes` at once, one intra-op thread each). Writes
bench/results/<name>.{md,json} and <name>_ru.png: mean ± std per system, each expected ordering
with its margin (mean paired difference over seeds), two standard errors and verdict, the
per-seed values, and retrieval utility vs pre-training step for every run and seed; see
realm_tf/knowledge_world/ablation_config.py for what each row is.
"""
import dataclasses
import os
import platform
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from realm_tf.knowledge_world import ablation_config  # pylint: disable=wrong-import-position
from realm_tf.knowledge_world import ablation_report  # pylint: disable=wrong-import-position
from realm_tf.knowledge_world import ablation_runner  # pylint: disable=wrong-import-position
from bench import bench_utils  # pylint: disable=wrong-import-position

_SIZE = flags.DEFINE_enum("size", "full", ["full", "small"], "Preset.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "/tmp/realm_ablations",
                                  "Working directory (worlds, models); replaced.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", "bench/results", "Where results go.")
_NAME = flags.DEFINE_string("name", "", "Result file name (default: ablations[_small]).")
_VARIANTS = flags.DEFINE_list("variants", [], f"Subset of {ablation_config.VARIANTS}.")
_SEEDS = flags.DEFINE_list("seeds", [], "Seeds (default: the preset's, 0,1,2).")
_PROCESSES = flags.DEFINE_integer("processes", 2, "Seeds run at once, one process each.")
_NUM_ENTITIES = flags.DEFINE_integer("num_entities", None, "Override the world size.")
_PRETRAIN_STEPS = flags.DEFINE_integer("pretrain_steps", None, "Override pre-training steps.")
_FINETUNE_STEPS = flags.DEFINE_integer("finetune_steps", None, "Override fine-tuning steps.")
_FINETUNE_RETRIEVER_LR = flags.DEFINE_float(
    "finetune_retriever_learning_rate", None,
    "Override the query tower's fine-tuning rate (AblationConfig; < 0: the reader's).")


def main(argv):
  del argv
  preset = (ablation_config.full_config if _SIZE.value == "full" else
            ablation_config.small_config)
  config = preset(_OUTPUT_DIR.value)
  overrides = {}
  if _VARIANTS.value:
    overrides["variants"] = tuple(_VARIANTS.value)
  if _SEEDS.value:
    overrides["seeds"] = tuple(int(seed) for seed in _SEEDS.value)
  if _NUM_ENTITIES.value is not None:
    overrides["world"] = dataclasses.replace(config.world, num_entities=_NUM_ENTITIES.value)
  if _PRETRAIN_STEPS.value is not None:
    overrides["pretrain_steps"] = _PRETRAIN_STEPS.value
  if _FINETUNE_STEPS.value is not None:
    overrides["finetune_steps"] = _FINETUNE_STEPS.value
  if _FINETUNE_RETRIEVER_LR.value is not None:
    rate = _FINETUNE_RETRIEVER_LR.value
    overrides["finetune_retriever_learning_rate"] = None if rate < 0 else rate
  config = dataclasses.replace(config, **overrides)
  print(bench_utils.machine_line(), flush=True)
  started = time.perf_counter()
  results = ablation_runner.run_seeds(config, _PROCESSES.value,
                                      log=lambda m: print(m, flush=True))
  minutes = (time.perf_counter() - started) / 60
  command = "python bench/ablations.py " + " ".join(sys.argv[1:])
  paths = ablation_report.write_report(
      results, config, _RESULTS_DIR.value, command.strip(),
      _NAME.value or ("ablations" if _SIZE.value == "full" else "ablations_small"))
  with open(paths["markdown"], "a", encoding="utf-8") as f:
    f.write(f"\n{bench_utils.machine_line()}; {minutes:.1f} min wall clock with "
            f"{_PROCESSES.value} processes ({platform.python_version()}).\n")
  with open(paths["markdown"], encoding="utf-8") as f:
    print(f.read())
  print(f"total {minutes:.1f} min; wrote " + ", ".join(paths.values()))


if __name__ == "__main__":
  app.run(main)
