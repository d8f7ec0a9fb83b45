"""The REALM pre-training task (`training.pretraining_lib`): starts from the previous stage's
saved towers (an ICT run's `retriever/`, a pre-training run's `retriever/` and `reader/`), or
from Google's released pre-trained towers (`cc_news_pretrained/{embedder,bert}`, with the
released `block_emb` as its step-0 index), and BERT weights for the towers nothing else
fills; warms a new reader's MLM head up when those weights have none
(`training.mlm_warmup`); refreshes its MIPS index synchronously or with the asynchronous
builder (`retrieval.index_refresh`, `retrieval.async_refresh`)."""
import os
from typing import Dict, Tuple

import tensorflow as tf
from absl import logging

from realm_tf import checkpoints
from realm_tf import distribute
from realm_tf import errors
from realm_tf import presets
from realm_tf.experiments.base_task import Task
from realm_tf.keras import keras
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.models.saving import load_model
from realm_tf.retrieval.async_refresh import AsynchronousRefresher
from realm_tf.retrieval import initial_index
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.training import candidates
from realm_tf.training.mlm_warmup import MlmWarmup
from realm_tf.training.pretraining_lib import RealmPretrainer


WARMUP_DIR = "mlm_warmup"


class PretrainTask(Task):
  """REALM pre-training, after the MLM-head warm-up of a new reader without one
  (`warm_up_reader`, in `model_dir/mlm_warmup`); writes `model_dir/retriever`,
  `model_dir/reader` and the indexes."""
  mlm_head_loaded = False  # `initialize`: a new reader's BERT weights brought an MLM head

  def saved(self, tower: str) -> str:
    """The saved `tower` to start from: `task.<tower>_dir`, else `init.checkpoint`'s."""
    explicit = getattr(self.task, f"{tower}_dir")
    if explicit or not self.task.init.checkpoint:
      return explicit
    if self.previous is None or self.previous.fine_tuned:
      raise errors.InputError(errors.describe(
          self.task.init.checkpoint, "not the model directory of an ICT or pre-training run",
          "Point task.init.checkpoint at one, or set task.retriever_dir / task.reader_dir"))
    return self.previous.saved(tower)

  def check_settings(self) -> None:
    """Also: one start per tower, a saved tower or a released one."""
    super().check_settings()
    init = self.task.init
    for source, tower in ((init.realm_embedder, "retriever"), (init.realm_encoder, "reader")):
      if source and self.saved(tower):
        raise errors.InputError(errors.describe(
            source, f"a second {tower} to start from besides {self.saved(tower)}",
            f"Pass one of --init_realm_{'embedder' if tower == 'retriever' else 'encoder'} "
            f"and --{tower}_dir"))

  def build_model(self) -> Tuple[Retriever, Reader]:
    """The previous stage's saved towers, loaded whole, and new ones for the others (a new
    reader with `task.model`'s span head, initialised from `task.reader_seed` when set)."""
    model = self.model_config()
    keras.utils.set_random_seed(self.config.runtime.seed)
    with self.scope():
      vocab = dict(vocab_size=self.tokenizer.vocab_size, vocab_file=self.vocab_file)
      retriever = (load_model(self.saved("retriever"), **vocab) if self.saved("retriever") else
                   presets.build_retriever(model.encoder, self.task.share_towers,
                                           projection_size=model.projection_size,
                                           head=model.retriever_head,
                                           doc_input=model.doc_input))
      reader = (load_model(self.saved("reader"), **vocab) if self.saved("reader") else
                self._new_reader(model))
    return retriever, reader

  def _new_reader(self, model: presets.ModelConfig) -> Reader:
    if self.task.reader_seed is not None:
      keras.utils.set_random_seed(self.task.reader_seed)
    return presets.build_reader(model.encoder, span_hidden_size=model.span_hidden_size,
                                max_span_width=model.max_span_width, span_head=model.span_head)

  def initialize(self, model: Tuple[Retriever, Reader]) -> Tuple[Retriever, Reader]:
    """The initial weights of the new towers (the saved ones keep theirs): the released REALM
    embedder (`init.realm_embedder`) into the retriever and knowledge-augmented encoder
    (`init.realm_encoder`, BERT and MLM head) into the reader, else `init.bert_weights`; sets
    `mlm_head_loaded`: whether a new reader's weights brought an MLM head."""
    retriever, reader = model
    init = self.task.init
    with self.scope():
      if init.realm_embedder:
        checkpoints.load_realm_embedder(retriever, init.realm_embedder)
      elif not self.saved("retriever"):
        for tower in {id(e): e for e in (retriever.query_encoder,
                                         retriever.doc_encoder)}.values():
          presets.load_bert_weights(tower, init.bert_weights)
      if init.realm_encoder:
        checkpoints.load_realm_encoder(reader, init.realm_encoder)
        self.mlm_head_loaded = True
      elif not self.saved("reader"):
        self.mlm_head_loaded = presets.load_reader_weights(reader, init.bert_weights)
    presets.note_random_start([
        f"the {name}" for name, source in (("retriever", init.realm_embedder),
                                           ("reader", init.realm_encoder))
        if not source and not self.saved(name) and presets.is_random(init.bert_weights)])
    return retriever, reader

  def warm_up_reader(self, reader: Reader, store: Corpus) -> None:
    """`task.mlm_warmup_steps` of MLM-head warm-up (`training.mlm_warmup`) for a new reader
    whose BERT weights had no MLM head, before REALM's first step (a resumed run restores its
    reader from REALM's checkpoint); logs why it is skipped otherwise, and the held-out MLM
    accuracy REALM starts from."""
    steps, bert_weights = self.task.mlm_warmup_steps, self.task.init.bert_weights
    if not steps:
      return
    checkpoints = os.path.join(self.config.trainer.model_dir, "checkpoints")
    if tf.train.latest_checkpoint(checkpoints):  # REALM's checkpoint restores the reader
      logging.info("MLM warm-up skipped: REALM pre-training resumes from %s", checkpoints)
      return
    if self.saved("reader"):
      logging.info("MLM warm-up skipped: the reader is a saved one (%s)", self.saved("reader"))
      return
    if presets.is_random(bert_weights) or self.mlm_head_loaded:
      logging.info("MLM warm-up skipped: %s", f"{self.task.init.realm_encoder or bert_weights} "
                   "has an MLM head" if self.mlm_head_loaded
                   else "the reader has no BERT weights (task.init.bert_weights)")
      return
    warmup = MlmWarmup(reader, store, self.tokenizer,
                       os.path.join(self.config.trainer.model_dir, WARMUP_DIR), steps,
                       seed=self.config.runtime.seed, strategy=self.strategy)
    accuracy = warmup.train(verbose=self.verbose)
    logging.info("reader MLM accuracy at the start of REALM: %.4f (masked wordpieces of %d "
                 "held-out blocks; %.4f before %d steps of MLM warm-up)", accuracy["end"],
                 len(warmup.held_out_rows), accuracy["start"], steps)

  def build_inputs(self) -> Corpus:
    self.require("corpus", "examples_dir")
    return Corpus.load(self.task.corpus)

  def _refresher(self, store: Corpus):
    task, model_dir = self.task, self.config.trainer.model_dir
    special = (self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id)
    index_root = os.path.join(model_dir, "index")
    shared = dict(compute_dtype=task.embedding_dtype, jit_compile=task.embedding_jit_compile,
                  keep_versions=task.keep_indexes, scann=task.scann, sharding=task.sharding)
    if task.refresh == "sync":
      return SynchronousRefresher(index_root, task.refresh_every, store, special,
                                  task.index_kind, task.model.block_length,
                                  tokenizer=self.tokenizer, **shared)
    if store.title_ids is None:
      raise errors.InputError(errors.describe(
          task.corpus, "the asynchronous index builder embeds the corpus's stored wordpieces, "
          "and this corpus has none", "Pass block shards of pipelines.wikipedia_to_blocks "
          "(or a released blocks.tfr with its examples.tfr beside it), or --refresh=sync"))
    # The builder reads block shards, or the corpus form another input was converted into.
    corpus_dir = task.corpus if tf.io.gfile.isdir(task.corpus) else store.directory
    return AsynchronousRefresher(index_root, task.refresh_every, store, special, corpus_dir,
                                 os.path.join(model_dir, "snapshots"), task.index_kind,
                                 task.model.block_length, list(task.builder_args),
                                 max_builder_failures=task.max_builder_failures,
                                 max_staleness=task.max_index_staleness, **shared)

  def publish_initial_index(self, retriever: Retriever, store: Corpus) -> None:
    """`init.index`, the initial doc tower's precomputed embeddings of the corpus (the
    released `block_emb`), as the step-0 index of a new run (`retrieval.initial_index`): the
    refresher starts on it instead of embedding every block."""
    checkpoints_dir = os.path.join(self.config.trainer.model_dir, "checkpoints")
    if not self.task.init.index or tf.train.latest_checkpoint(checkpoints_dir):
      return
    if distribute.is_chief(self.strategy):
      initial_index.publish_initial_index(
          os.path.join(self.config.trainer.model_dir, "index"), store, self.tokenizer,
          retriever, self.task.init.index, block_length=self.task.model.block_length,
          kind=self.task.index_kind, scann=self.task.scann, sharding=self.task.sharding,
          embedding_dtype=self.task.embedding_dtype)
    distribute.barrier(self.strategy)

  def run(self) -> Dict[str, float]:
    store = self.build_inputs()
    task = self.task
    candidates.check_num_candidates(store, task.num_candidates, task.null_document,
                                    task.exclude_source)
    retriever, reader = self.initialize(self.build_model())
    self.warm_up_reader(reader, store)
    self.publish_initial_index(retriever, store)
    history = RealmPretrainer(self.config, retriever, reader, store, self.tokenizer,
                              self._refresher(store), self.strategy,
                              monitor=self.recall_monitor(store)).train(verbose=self.verbose)
    return history[-1] if history else {}
