"""REALM pre-training step vs a plain MLM step of the same reader on the same sequences.

  python bench/training_step_bench.py --encoder=minilm_l6 --batch_size=4

The REALM step = query embedding for retrieval + MIPS search + candidate packing (host) +
re-embedding query and K candidates with gradients + reading K sequences + marginal loss.
The plain step = the reader's forward/backward over the same B·K reader sequences with the
ordinary MLM loss. Synthetic blocks have the length distribution of real Wikipedia blocks
(lead extracts, median ≈ 180 of 288). Writes bench/results/training_step.{md,json}.
"""
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import presets  # pylint: disable=g-import-not-at-top
from realm_tf.data import formats  # pylint: disable=g-import-not-at-top
from realm_tf.data import shards  # pylint: disable=g-import-not-at-top
from realm_tf.experiment_config import ExperimentConfig  # pylint: disable=g-import-not-at-top
from realm_tf.experiment_config import PretrainTaskConfig  # pylint: disable=g-import-not-at-top
from realm_tf.experiment_config import TrainerConfig  # pylint: disable=g-import-not-at-top
from realm_tf.retrieval.corpus import Corpus  # pylint: disable=g-import-not-at-top
from realm_tf.retrieval.index_refresh import SynchronousRefresher  # pylint: disable=g-import-not-at-top
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer  # pylint: disable=g-import-not-at-top
from realm_tf.training.pretraining_lib import RealmPretrainer  # pylint: disable=g-import-not-at-top
from realm_tf.training.pretraining_data import masked_query_dataset  # pylint: disable=g-import-not-at-top

_ENCODER = flags.DEFINE_enum("encoder", presets.DEFAULT_ENCODER, presets.ENCODERS, "BERT size.")
_BATCH = flags.DEFINE_integer("batch_size", 4, "Queries per step.")
_K = flags.DEFINE_integer("num_candidates", 8, "K, null document included.")
_NUM_BLOCKS = flags.DEFINE_integer("num_blocks", 2000, "Synthetic corpus size.")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps per variant.")


def synthetic_world(directory: str, vocab_size: int, num_blocks: int, rng):
  """Blocks and examples with real-Wikipedia-like lengths over random wordpieces."""
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(vocab_size - 5)]
  with tf.io.TFRecordWriter(os.path.join(directory, "blocks-00000-of-00001.tfrecord")) as w:
    for i in range(num_blocks):
      body = rng.integers(5, vocab_size, int(np.clip(rng.normal(180, 60), 20, 280)))
      w.write(formats.block_example(i + 1, f"t{i}", "x", rng.integers(5, vocab_size, 3), body))
  with tf.io.TFRecordWriter(os.path.join(directory, "examples-00000-of-00001.tfrecord")) as w:
    for i in range(200):
      query = rng.integers(5, vocab_size, int(rng.integers(15, 40)))
      start = int(rng.integers(0, len(query) - 3))
      w.write(formats.pretraining_example(query, start, start + 2, int(rng.integers(num_blocks)) + 1))
  for prefix in ("blocks", "examples"):
    shards.write_manifest(directory, prefix, {"synthetic": True})
  return WordpieceTokenizer(vocab, lower_case=False)


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  rng = np.random.default_rng(0)
  directory = tempfile.mkdtemp()
  tokenizer = synthetic_world(directory, 30522, _NUM_BLOCKS.value, rng)
  store = Corpus.load(directory)
  encoder = presets.encoder_config(_ENCODER.value, tokenizer.vocab_size)
  retriever = presets.build_retriever(encoder)
  reader = presets.build_reader(encoder)
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  refresher = SynchronousRefresher(os.path.join(directory, "index"), 10**9, store, special,
                                   "scann")
  config = ExperimentConfig(
      task=PretrainTaskConfig(examples_dir=directory, num_candidates=_K.value),
      trainer=TrainerConfig(model_dir=os.path.join(directory, "run"), num_steps=1000,
                            batch_size=_BATCH.value, learning_rate=3e-5))
  trainer = RealmPretrainer(config, retriever, reader, store, tokenizer, refresher)
  started = time.perf_counter()
  refresher.start(0, retriever)
  index_build_s = time.perf_counter() - started
  data = iter(masked_query_dataset(directory, tokenizer, _BATCH.value, query_length=96))
  batches = [next(data) for _ in range(_STEPS.value + 1)]

  trainer._step(batches[0])  # pylint: disable=protected-access  (trace)
  realm = bench_utils.best_time(lambda: [trainer._step(b) for b in batches[1:]],  # pylint: disable=protected-access
                                repeats=1, warmup=0) / _STEPS.value

  # The same B·K reader sequences, plain MLM (no retrieval, no retriever towers).
  candidates = trainer.candidates
  packed = []
  for batch in batches:
    query_ids = tf.RaggedTensor.from_tensor(batch["query_ids"], lengths=batch["query_length"])
    rows = rng.integers(0, len(store), (_BATCH.value, _K.value))
    _, reader_features = candidates.features(tf.constant(rows), query_ids)
    packed.append(({n: tf.reshape(t, [_BATCH.value * _K.value, -1])
                    for n, t in reader_features.items()},
                   tf.repeat(batch["masked_lm_positions"], _K.value, axis=0),
                   tf.repeat(batch["masked_lm_ids"], _K.value, axis=0),
                   tf.repeat(batch["masked_lm_weights"], _K.value, axis=0)))
  optimizer = trainer.optimizer

  @tf.function
  def mlm_step(features, positions, ids, weights):
    with tf.GradientTape() as tape:
      logits = reader.mlm_logits(features, positions, training=True)
      losses = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, logits)
      loss = tf.reduce_sum(losses * weights) / tf.reduce_sum(weights)
    grads = tape.gradient(loss, reader.trainable_variables)
    optimizer.apply_gradients(zip(grads, reader.trainable_variables))
    return loss

  mlm_step(*packed[0])
  plain = bench_utils.best_time(lambda: [mlm_step(*p).numpy() for p in packed[1:]],
                                repeats=1, warmup=0) / _STEPS.value
  rows = [{"step": "plain MLM, reader over B·K sequences", "seconds": plain, "ratio": 1.0},
          {"step": "REALM (retrieve, re-embed, read, marginalise)", "seconds": realm,
           "ratio": realm / plain}]
  markdown = (f"{_ENCODER.value}, B = {_BATCH.value}, K = {_K.value}, query 96, blocks ≤ 288, "
              f"reader 384; corpus {len(store)} blocks (embedded and indexed in {index_build_s:.1f} s)."
              f"\n\n" + bench_utils.markdown_table(rows, ["step", "seconds", "ratio"]))
  print(markdown)
  print(bench_utils.write_results("training_step", rows, markdown))


if __name__ == "__main__":
  app.run(main)
