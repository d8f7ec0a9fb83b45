"""Masked-LM warm-up of a new reader's MLM head on the corpus blocks, before REALM.

A reader whose BERT weights carry no MLM head (all-MiniLM-L6-v2, a sentence embedder) starts
REALM with an untrained head: p(y|z,x) hardly depends on z and the retriever's gradient is
noise (REALM §3.4's cold start). The warm-up trains it as a plain masked LM on the blocks
alone, with no retrieval: B blocks packed as `[CLS] title [SEP] body [SEP]` (Lb wordpieces) and
masked BERT-style (`masking.random_token_mask`: 15%, at most M, each `[MASK]`). By default
(`train_encoder=True`) the encoder and the word embeddings the decoder shares train with the
head, since over MiniLM's frozen encoder the head alone stalls (BENCHMARKS.md §11).

`held_out_blocks` blocks (a seeded draw) are never trained on; the accuracy on their masked
wordpieces (`held_out_mlm_accuracy`, masks fixed once) is measured before the first step,
every `eval_every` steps and at the last, through `TrainLoop` (`eval.jsonl`, `best/`), whose
checkpoints, resume and `metrics.jsonl` are the stage's (`model_dir`).
"""
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from realm_tf import distribute
from realm_tf import errors
from realm_tf import graph_functions
from realm_tf.models.reader import Reader
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization import masking
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import apply_gradients
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.optimizer import create_slots
from realm_tf.training.train_loop import Evaluation
from realm_tf.training.train_loop import TrainLoop

METRIC = "held_out_mlm_accuracy"
_EVAL_BATCH = 32
_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


def trained_variables(reader: Reader, train_encoder: bool):
  """The variables the warm-up trains: the MLM head's own (without the tied word embeddings),
  and with `train_encoder` the encoder's."""
  table = reader.encoder.get_embedding_table()
  head = [v for v in reader.masked_lm.trainable_variables if v is not table]
  return (reader.encoder.trainable_variables + head) if train_encoder else head


def warmup_step(reader: Reader, optimizer, train_encoder: bool):
  """The replicated step: batch -> per-replica sums {"loss", "correct", "masked_tokens"}; the
  loss is the masked-token cross-entropy summed over the replica and divided by the global
  count of masked tokens (`batch["normalizer"]`)."""

  def step(batch):
    features = {k: batch[k] for k in _FEATURES}
    positions, weights = batch["masked_lm_positions"], batch["masked_lm_weights"]
    variables = trained_variables(reader, train_encoder)
    with tf.GradientTape() as tape:
      if train_encoder:
        logits = reader.mlm_logits(features, positions, training=True)
      else:  # no dropout in a frozen encoder, and no backpropagation through it
        sequence = tf.stop_gradient(reader.sequence_output(features, training=False))
        logits = reader.masked_lm(sequence, positions)
      logits = tf.cast(logits, tf.float32)  # [b, M, V]
      token_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
          batch["masked_lm_ids"], logits)  # [b, M]
      loss = tf.reduce_sum(token_loss * weights) / batch["normalizer"][0]
    gradients = tape.gradient(loss, variables)
    # The reader's pooler and span head take no part in masked-LM training.
    apply_gradients(optimizer, [(g, v) for g, v in zip(gradients, variables) if g is not None])
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    correct = tf.cast(tf.equal(predicted, batch["masked_lm_ids"]), tf.float32) * weights
    return {"loss": loss, "correct": tf.reduce_sum(correct),
            "masked_tokens": tf.reduce_sum(weights)}

  return step


class MlmWarmup:
  """Trains a reader's MLM head on masked corpus blocks (module docstring).

  Args:
    reader: built inside `strategy.scope()`.
    store: the corpus; its blocks in `tokenizer`'s wordpieces (`Corpus.wordpieces`).
    tokenizer: the reader's vocabulary.
    model_dir: the stage's checkpoints, `metrics.jsonl`, `eval.jsonl`, `best/`.
    num_steps, batch_size, learning_rate: the schedule (AdamW, `training.optimizer`).
    block_length: Lb of the packed blocks.
    max_predictions: M masked wordpieces per block at most.
    held_out_blocks: blocks never trained on, whose masked wordpieces are the evaluation
      (at most a quarter of the corpus).
    train_encoder: train the encoder and the tied word embeddings too (False: the head
      alone).
    eval_every: steps between held-out evaluations (None: the start and the end only).
    checkpoint_every: steps between checkpoints (and one at the end).
    seed: the held-out draw, the data order and the masks.
    strategy: the `tf.distribute` strategy (default: the current one).
  """

  def __init__(self, reader: Reader, store: Corpus, tokenizer: WordpieceTokenizer,
               model_dir: str, num_steps: int, batch_size: int = 16,
               learning_rate: float = 1e-4, block_length: int = 128, max_predictions: int = 20,
               held_out_blocks: int = 256, train_encoder: bool = True,
               eval_every: Optional[int] = None, checkpoint_every: int = 100, seed: int = 0,
               strategy=None):
    self.reader, self.tokenizer = reader, tokenizer
    self.batch_size, self.max_predictions, self.seed = batch_size, max_predictions, seed
    self.strategy = strategy or tf.distribute.get_strategy()
    self.eval_every = eval_every or num_steps
    self._featurizer = Featurizer(tokenizer, block_length=block_length)
    self._special = [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id]
    if len(store) < 4:
      raise errors.InputError(errors.describe(
          store.source or "corpus", f"{len(store)} blocks: the MLM warm-up holds a quarter of "
          "the blocks out for its evaluation and needs at least 4",
          "Pass a larger corpus, or no MLM warm-up"))
    title_ids, body_ids = store.wordpieces(tokenizer)
    rows = np.random.default_rng(seed).permutation(len(store))
    held_out = min(held_out_blocks, len(store) // 4)
    self.held_out_rows, self.train_rows = np.sort(rows[:held_out]), np.sort(rows[held_out:])
    self._train = (title_ids.gather(self.train_rows), body_ids.gather(self.train_rows))
    self._held_out = [self._masked(title_ids.gather(part), body_ids.gather(part),
                                   tf.constant([seed, -1 - i], tf.int64))
                      for i, part in enumerate(np.array_split(
                          self.held_out_rows, max(1, -(-held_out // _EVAL_BATCH))))]
    with self.strategy.scope():
      self.optimizer = create_optimizer(OptimizerConfig(learning_rate=learning_rate,
                                                        num_train_steps=num_steps))
    self.loop = TrainLoop(model_dir, dict(reader=reader, optimizer=self.optimizer), num_steps,
                          checkpoint_every=checkpoint_every, max_to_keep=1,
                          strategy=self.strategy, run_config=dict(
                              task="mlm_warmup", reader=run_config.reader_structure(reader),
                              train_encoder=train_encoder,
                              vocab_fingerprint=run_config.vocab_fingerprint(
                                  tokenizer.vocabulary),
                              corpus_fingerprint=store.fingerprint),
                          before_first_step=lambda: create_slots(
                              self.optimizer, trained_variables(reader, train_encoder),
                              self.strategy))
    self._train_step = graph_functions.function(warmup_step(reader, self.optimizer, train_encoder))
    self._predict = graph_functions.function(lambda f: tf.argmax(reader.mlm_logits(
        {k: f[k] for k in _FEATURES}, f["masked_lm_positions"], training=False), axis=-1,
        output_type=tf.int32), reduce_retracing=True)

  def _masked(self, title_ids, body_ids, seed) -> Dict[str, tf.Tensor]:
    """[B, (T)] title and body wordpieces -> packed blocks [B, L] with random-token masks
    ("masked_lm_positions" / "masked_lm_ids" / "masked_lm_weights" [B, M])."""
    features = self._featurizer.pack_blocks(title_ids, body_ids)
    masked = masking.random_token_mask(features["input_word_ids"],
                                       mask_id=self.tokenizer.mask_id, special_ids=self._special,
                                       seed=seed, max_predictions=self.max_predictions)
    return dict(features, **masked)

  def dataset(self, start_step: int = 0) -> tf.data.Dataset:
    """The endless training batches from step `start_step` on: the training blocks in a new
    order each epoch, drawn from `seed` alone (not the global seed), so a resumed run reads
    the batches and masks an uninterrupted one would."""
    title_ids, body_ids = self._train
    count = len(self.train_rows)
    order = tf.data.Dataset.counter().flat_map(
        lambda epoch: tf.data.Dataset.from_tensor_slices(
            tf.random.experimental.stateless_shuffle(tf.range(count), [self.seed, epoch])))
    return (order.batch(self.batch_size, drop_remainder=True).enumerate().skip(start_step)
            .map(graph_functions.dataset_fn(
                lambda i, rows: self._masked(tf.gather(title_ids, rows), tf.gather(body_ids, rows),
                                             tf.stack([tf.cast(self.seed, tf.int64), i]))))
            .prefetch(2))

  def held_out_accuracy(self) -> Dict[str, float]:
    """{"held_out_mlm_accuracy": fraction of the held-out blocks' masked wordpieces the
    reader predicts, "held_out_masked_tokens": their count}."""
    correct = tokens = 0.0
    for batch in self._held_out:
      weights = batch["masked_lm_weights"].numpy()
      hits = self._predict(batch).numpy() == batch["masked_lm_ids"].numpy()
      correct += float((hits * weights).sum())
      tokens += float(weights.sum())
    return {METRIC: correct / max(tokens, 1.0), "held_out_masked_tokens": tokens}

  def _step(self, batch) -> Dict[str, float]:
    strategy = self.strategy
    batch = dict(batch, normalizer=tf.fill([self.batch_size],
                                           tf.reduce_sum(batch["masked_lm_weights"])))
    sums = strategy.run(self._train_step, args=(distribute.distribute_batch(strategy, batch),))
    sums = {k: float(strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None))
            for k, v in sums.items()}
    return {"loss": sums["loss"], "mlm_accuracy": sums["correct"] / max(sums["masked_tokens"],
                                                                         1.0)}

  def train(self, verbose: bool = True) -> Dict[str, float]:
    """Trains to `num_steps` (resuming from the last checkpoint); returns {"start", "end"}:
    the held-out MLM accuracy before the first step and after the last (`eval.jsonl`)."""
    self.loop.verbose = verbose
    data = iter(self.dataset(self.loop.restore()))
    self.loop.run(lambda _: self._step(next(data)),
                  evaluation=Evaluation(self.held_out_accuracy, self.eval_every, METRIC))
    evaluations = self.loop.evaluations()
    return {"start": evaluations[0][METRIC], "end": evaluations[-1][METRIC]}
