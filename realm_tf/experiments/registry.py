"""The registered experiments, with the defaults of today's binaries, and how a run's final
config is assembled: registered default <- `--config_file` <- `--params_override`.

    config = registry.build("pretrain", "my_run.json", "trainer.num_steps=10")
"""
from typing import Dict

from realm_tf import errors
from realm_tf.experiments import overrides
from realm_tf.experiment_config import ClassificationTaskConfig
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import IctTaskConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import PretrainTaskConfig
from realm_tf.experiment_config import TrainerConfig

EXPERIMENTS: Dict[str, ExperimentConfig] = {
    "ict": ExperimentConfig(
        task=IctTaskConfig(),
        trainer=TrainerConfig(num_steps=1000, batch_size=32, learning_rate=1e-4,
                              eval_every=100)),
    "pretrain": ExperimentConfig(
        task=PretrainTaskConfig(),
        trainer=TrainerConfig(num_steps=1000, batch_size=16, learning_rate=3e-5,
                              eval_every=500)),
    "open_qa": ExperimentConfig(
        task=OpenQATaskConfig(),
        trainer=TrainerConfig(num_steps=10000, batch_size=4, learning_rate=1e-5,
                              checkpoint_every=1000)),
    "classification": ExperimentConfig(
        task=ClassificationTaskConfig(),
        trainer=TrainerConfig(num_steps=1000, batch_size=8, learning_rate=2e-5,
                              checkpoint_every=500, eval_every=500)),
}
NAMES = tuple(EXPERIMENTS)


def get(name: str) -> ExperimentConfig:
  """The registered defaults of experiment `name`."""
  if name not in EXPERIMENTS:
    raise errors.InputError(errors.describe(
        name, "not a registered experiment", f"Pick one of {', '.join(NAMES)}"))
  return EXPERIMENTS[name]


def name_of(config: ExperimentConfig) -> str:
  """The experiment whose task `config` runs."""
  (name,) = [n for n, c in EXPERIMENTS.items() if type(c.task) is type(config.task)]
  return name


def build(name: str, config_file: str = "", params_override: str = "") -> ExperimentConfig:
  """Experiment `name`'s defaults with the settings of `config_file` (JSON, e.g. a run's
  `experiment.json`; its "experiment" key, when present, must be `name`) and then
  `params_override` applied."""
  config = get(name)
  if config_file:
    values = overrides.read_file(config_file)
    saved = values.pop("experiment", name)
    if saved != name:
      raise errors.InputError(errors.describe(
          config_file, f"holds a {saved!r} experiment, not {name!r}",
          f"Run it with --experiment={saved}"))
    try:
      config = overrides.override(config, values)
    except errors.InputError as e:
      raise errors.InputError(f"{config_file}: {e}") from e
  return overrides.override(config, params_override)

