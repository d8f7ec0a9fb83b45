"""The retrieval-augmented classification task (`classification.trainer`), initialised as
Open-QA is: `init.checkpoint=<REALM pre-training model_dir>` (its retriever and reader), or an
ICT run's model directory (its saved `retriever/`; the reader from `init.bert_weights`)."""
import dataclasses
from typing import Dict

from realm_tf import presets
from realm_tf.classification.trainer import ClassificationTrainer
from realm_tf.experiments.base_task import Task
from realm_tf.experiments.open_qa_task import OpenQATask
from realm_tf.experiments.open_qa_task import Towers
from realm_tf.models.saving import load_model


class ClassificationTask(OpenQATask):
  """Retrieval-augmented classification; writes its run into `model_dir`."""

  min_steps = 1

  @property
  def from_ict(self) -> bool:
    return bool(self.previous) and self.previous.structure.get("task") == "ict"

  def check_settings(self) -> None:
    Task.check_settings(self)  # an ICT run leaves the reader to init.bert_weights
    if not self.from_ict:
      presets.check_init_sources(self.task.init)

  def initialize(self, model: Towers) -> Towers:
    if not self.from_ict:
      return super().initialize(model)
    retriever, reader = model
    source = load_model(self.previous.saved("retriever"))
    for target, tower in ((retriever.query_encoder, source.query_encoder),
                          (retriever.query_projection, source.query_projection),
                          (retriever.doc_encoder, source.doc_encoder),
                          (retriever.doc_projection, source.doc_projection)):
      target.set_weights(tower.get_weights())
    presets.load_reader_weights(reader, self.task.init.bert_weights)
    presets.note_random_start(["the reader"] * presets.is_random(self.task.init.bert_weights))
    return model

  def run(self) -> Dict[str, float]:
    self.require("corpus", "train_data")
    config = self.resolved()
    if self.from_ict:  # the towers come from the saved retriever, not a checkpoint
      init = dataclasses.replace(config.task.init, checkpoint="",
                                 checkpoint_share_towers=self.previous.share_towers)
      config = dataclasses.replace(config, task=dataclasses.replace(config.task, init=init))
    trainer = ClassificationTrainer(config, self.strategy,
                                    lambda message: print(message, flush=True),
                                    initialize=self.initialize)
    return trainer.run()
