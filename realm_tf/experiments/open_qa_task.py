"""The Open-QA fine-tuning task (`qa.finetune_lib`): a pre-training run's model directory is
directly its initialisation (`init.checkpoint=<pre-training model_dir>`: its checkpoints, with
the run's retriever head and tower sharing)."""
import dataclasses
from typing import Callable, Dict, Tuple

from realm_tf import presets
from realm_tf.experiments.base_task import Task
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.qa.finetune_config import FineTuneConfig
from realm_tf.qa.finetune_lib import FineTuner

Towers = Tuple[Retriever, Reader]


class OpenQATask(Task):
  """Open-QA fine-tuning; writes a QA model directory (`qa.model`) into `model_dir`."""

  def init_config(self) -> presets.InitConfig:
    """`task.init` with a previous run's model directory resolved to its checkpoints."""
    init = self.task.init
    if self.previous is None:
      return init
    return dataclasses.replace(init, checkpoint=self.previous.checkpoint_dir,
                               checkpoint_share_towers=self.previous.share_towers)

  def fine_tune_config(self) -> FineTuneConfig:
    """The library's config of this experiment."""
    task, trainer, runtime = self.task, self.config.trainer, self.config.runtime
    return FineTuneConfig(
        model_dir=trainer.model_dir, corpus=task.corpus, train_data=task.train_data,
        vocab_file=self.vocab_file, dev_data=task.dev_data, dataset=task.dataset,
        model=self.model_config(), init=self.init_config(), batch_size=trainer.batch_size,
        num_train_steps=trainer.num_steps, learning_rate=trainer.learning_rate,
        retriever_learning_rate=trainer.retriever_learning_rate,
        warmup_steps=trainer.warmup_steps, reader_top_k=task.reader_top_k,
        retriever_top_k=task.retriever_top_k, max_gold_spans=task.max_gold_spans,
        index_kind=task.index_kind, scann=task.scann,
        index_refresh_steps=task.index_refresh_steps, eval_every_steps=trainer.eval_every,
        eval_max_examples=trainer.eval_max_examples,
        checkpoint_every_steps=trainer.checkpoint_every,
        keep_checkpoints=trainer.keep_checkpoints, log_every_steps=trainer.log_every,
        seed=runtime.seed, compute_dtype=runtime.compute_dtype,
        embedding_dtype=task.embedding_dtype)

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
    return FineTuner(self.fine_tune_config(), self.strategy, log,
                     build_model=self.build_model, initialize=self.initialize)

  def run(self) -> Dict[str, float]:
    self.require("corpus", "train_data")
    result = self.fine_tuner(lambda message: print(message, flush=True)).run()
    return {"step": float(result.step), "best_exact_match": result.best_exact_match}
