"""One seed's result of the knowledge-world ablations, and its file in the seed's directory."""
import dataclasses
import json
import os
from typing import Dict, List, Optional

from realm_tf.knowledge_world.ablation_config import AblationConfig
from realm_tf.knowledge_world.writer import WorldFiles


@dataclasses.dataclass
class AblationResult:
  """One seed. rows: one dict per variant (see `ablation_report.TABLE_COLUMNS`); timings: seconds per stage;
  metrics_files: {REALM pre-training run: metrics.jsonl}."""
  seed: int
  rows: List[Dict[str, object]]
  timings: Dict[str, float]
  metrics_files: Dict[str, str]
  ict_recall: float
  world: WorldFiles


RESULT_FILE = "result.json"


def _settings(config: AblationConfig) -> Dict[str, object]:
  """What a seed's result depends on: every setting but the list of the other seeds."""
  settings = json.loads(json.dumps(dataclasses.asdict(config), default=str))
  del settings["seeds"]
  if settings["finetune_retriever_learning_rate"] is None:  # the seeds run before it existed
    del settings["finetune_retriever_learning_rate"]
  return settings


def save_result(result: AblationResult, config: AblationConfig) -> str:
  """Writes a finished seed's result into its directory (`RESULT_FILE`), with its settings."""
  path = os.path.join(config.output_dir, RESULT_FILE)
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump({"config": _settings(config), "seed": result.seed, "rows": result.rows,
               "timings_s": result.timings, "metrics_files": result.metrics_files,
               "ict_recall": result.ict_recall, "world": dataclasses.asdict(result.world)},
              f, indent=1)
  os.replace(path + ".tmp", path)
  return path


def load_result(config: AblationConfig) -> Optional[AblationResult]:
  """The finished result in `config.output_dir` if it was run with exactly `config`'s
  settings, else None."""
  path = os.path.join(config.output_dir, RESULT_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    saved = json.load(f)
  if saved.get("config") != _settings(config):
    return None
  return AblationResult(saved["seed"], saved["rows"], saved["timings_s"],
                        saved["metrics_files"], saved["ict_recall"],
                        WorldFiles(**saved["world"]))
