"""The ICT task: the retriever's warm start (`training.ict_lib`) from BERT weights."""
from typing import Dict

from realm_tf import errors
from realm_tf import presets
from realm_tf.experiments.base_task import Task
from realm_tf.keras import keras
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.corpus import Corpus
from realm_tf.training import ict_lib


class IctTask(Task):
  """ICT over `task.corpus`; writes `model_dir/retriever` and `model_dir/doc_embedder`."""

  def build_model(self) -> Retriever:
    model = self.model_config()
    keras.utils.set_random_seed(self.config.runtime.seed)
    with self.scope():
      return presets.build_retriever(model.encoder, self.task.share_towers,
                                     projection_size=model.projection_size,
                                     head=model.retriever_head, doc_input=model.doc_input)

  def check_settings(self) -> None:
    super().check_settings()
    if self.task.init.checkpoint:
      raise errors.InputError(errors.describe(
          "task.init.checkpoint", "ICT starts from BERT weights, not a checkpoint",
          "Set task.init.bert_weights instead"))

  def initialize(self, model: Retriever) -> Retriever:
    with self.scope():
      for tower in {id(e): e for e in (model.query_encoder, model.doc_encoder)}.values():
        presets.load_bert_weights(tower, self.task.init.bert_weights)
    presets.note_random_start(["the retriever"] * presets.is_random(self.task.init.bert_weights))
    return model

  def build_inputs(self) -> Corpus:
    self.require("corpus")
    return Corpus.load(self.task.corpus)

  def run(self) -> Dict[str, float]:
    store = self.build_inputs()
    ict_lib.check_corpus(store, self.tokenizer, self.config.trainer.batch_size)
    retriever = self.initialize(self.build_model())
    metrics, _ = ict_lib.train_ict(self.config, retriever, store, self.tokenizer, self.strategy,
                           verbose=self.verbose, monitor=self.recall_monitor(store))
    return metrics
