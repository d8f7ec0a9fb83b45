"""The Open-QA fine-tuning task (`qa.finetune_lib`): a pre-training run's model directory is
directly its initialisation (`init.checkpoint=<pre-training model_dir>`: its checkpoints, with
the run's retriever head and tower sharing)."""
import dataclasses
from typing import Callable, Dict, Tuple

from realm_tf import presets
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiments.base_task import Task
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.qa.finetune_lib import FineTuner

Towers = Tuple[Retriever, Reader]


class OpenQATask(Task):
  """Open-QA fine-tuning; writes a QA model directory (`qa.model`) into `model_dir`."""

  min_steps = 0

  def check_settings(self) -> None:
    super().check_settings()
    presets.check_init_sources(self.task.init)

  def init_config(self) -> presets.InitConfig:
    """`task.init` with a previous run's model directory resolved to its checkpoints."""
    init = self.task.init
    if self.previous is None:
      return init
    return dataclasses.replace(init, checkpoint=self.previous.checkpoint_dir,
                               checkpoint_share_towers=self.previous.share_towers)

  def resolved(self) -> ExperimentConfig:
    """The experiment as the fine-tuner takes it: `task.vocab_file` set, `task.model` for it
    (`model_config`) and `task.init` with a previous run resolved (`init_config`); the config
    checks run again on these values (index refresh needs the previous run's shared
    towers)."""
    return dataclasses.replace(self.config, task=dataclasses.replace(
        self.task, vocab_file=self.vocab_file, model=self.model_config(),
        init=self.init_config()))

  def build_model(self) -> Towers:
    """Separate-tower retriever and reader (the fine-tuner calls this in its scope)."""
    return presets.build_models(self.model_config())

  def initialize(self, model: Towers) -> Towers:
    presets.initialize(*model, self.model_config(), self.init_config())
    return model

  def fine_tuner(self, log: Callable[[str], None] = print) -> FineTuner:
    """The fine-tuning run (from `init`, or resumed), before its first step."""
    if self.monitor:
      raise ValueError("Open-QA validates on task.dev_data, not a recall monitor")
    return FineTuner(self.resolved(), self.strategy, log,
                     build_model=self.build_model, initialize=self.initialize)

  def run(self) -> Dict[str, float]:
    self.require("corpus", "train_data")
    result = self.fine_tuner(lambda message: print(message, flush=True)).run()
    return {"step": float(result.step), "best_exact_match": result.best_exact_match}
