"""A chain of training stages: one stage's schedule (`Stage`), and the config it runs.

The demo (`demo.stages`), the knowledge-world ablations (`knowledge_world.ablation_runner`)
and the real-data benchmark's chain (`real_data.chain`) run registered experiments one after
another; `stage_experiment` is how each stage's `ExperimentConfig` is built: the registered
defaults <- the chain's shared settings <- the stage's schedule <- the stage's own settings,
every one a dotted key applied by `overrides.override` (which checks each key and type; a
group such as `task.model` also takes a config of its type whole).
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional

from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiments import overrides
from realm_tf.experiments import registry


@dataclasses.dataclass(frozen=True)
class Stage:
  """One training run's schedule.

  Attributes:
    steps, batch_size, learning_rate: `trainer.num_steps`, `.batch_size`, `.learning_rate`.
    checkpoint_every: `trainer.checkpoint_every` (None: half-way and at the end: a MiniLM
      checkpoint with its optimizer slots weighs 0.3-0.6 GB, and an interrupted stage loses
      at most half its steps).
  """
  steps: int
  batch_size: int
  learning_rate: float
  checkpoint_every: Optional[int] = None

  @classmethod
  def of(cls, config: Any, name: str, **changes: Any) -> "Stage":
    """Stage `name` of a chain's settings `config`: its `<name>_steps`, `<name>_batch_size`
    and `<name>_learning_rate` (the names of the chains' flags, and the keys of their run
    directories' digests and result files), with `changes` over them."""
    return dataclasses.replace(
        cls(getattr(config, f"{name}_steps"), getattr(config, f"{name}_batch_size"),
            getattr(config, f"{name}_learning_rate")), **changes)

  def settings(self) -> Dict[str, Any]:
    """The schedule as dotted `trainer` settings."""
    return {"trainer.num_steps": self.steps, "trainer.batch_size": self.batch_size,
            "trainer.learning_rate": self.learning_rate,
            "trainer.checkpoint_every": self.checkpoint_every or max(1, self.steps // 2)}


def stage_experiment(name: str, model_dir: str, stage: Stage, shared: Mapping[str, Any],
                     settings: Optional[Mapping[str, Any]] = None) -> ExperimentConfig:
  """The registered experiment `name` training into `model_dir`, with the chain's `shared`
  settings, `stage`'s schedule and the stage's own `settings` over it, in that order (dotted
  keys, `overrides.override`; a later value of a key wins)."""
  return overrides.override(registry.get(name), {
      **shared, "trainer.model_dir": model_dir, **stage.settings(), **(settings or {})})
