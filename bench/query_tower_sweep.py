"""Learning rate of the query tower, measured on retrieval alone (what Open-QA fine-tuning's
`retriever_learning_rate` should be).

    python bench/real_data.py --rows=raw_minilm     # prepares the corpus and block embeddings
    python bench/query_tower_sweep.py --learning_rates=2e-5,6e-5

The query tower of a `sentence`-head retriever built from all-MiniLM-L6-v2 is trained on the
retriever loss alone (the marginal log-likelihood of the answer-bearing blocks among the top-K
candidates of the raw model, the doc side frozen at the raw model's block embeddings) on the
NQ-open train split of `bench/real_data.py`; dev recall@5/@20 over all blocks after each epoch.
Legend: B batch, K candidates, D embedding dim.
"""
import os
import sys
import time

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=wrong-import-position
from realm_tf import presets  # pylint: disable=wrong-import-position
from realm_tf import pretrained  # pylint: disable=wrong-import-position
from realm_tf.evaluation import retrieval_recall  # pylint: disable=wrong-import-position
from realm_tf.real_data import questions  # pylint: disable=wrong-import-position
from realm_tf.retrieval.corpus import Corpus  # pylint: disable=wrong-import-position
from realm_tf.tokenization.featurizers import QueryFeaturizer  # pylint: disable=wrong-import-position
from realm_tf.training.optimizer import OptimizerConfig  # pylint: disable=wrong-import-position
from realm_tf.training.optimizer import create_optimizer  # pylint: disable=wrong-import-position

_CACHE = flags.DEFINE_string("cache_dir", "bench/results/real_data/cache",
                             "bench/real_data.py's cache (corpus and raw_minilm embeddings).")
_RATES = flags.DEFINE_list("learning_rates", ["2e-5", "6e-5"], "Peak learning rates.")
_EPOCHS = flags.DEFINE_integer("epochs", 3, "Epochs over the train split.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Questions per step.")
_K = flags.DEFINE_integer("candidates", 200, "K: the raw model's top-K blocks per question.")
_QUERY_LENGTH = flags.DEFINE_integer("query_length", 32, "Question wordpieces.")
_SEED = flags.DEFINE_integer("seed", 0, "Initialisation and data order.")


def _embed(retriever, featurizer, texts, batch=128) -> np.ndarray:
  return np.concatenate([retriever.embed_query(featurizer(tf.constant(texts[i:i + batch])),
                                               training=False).numpy()
                         for i in range(0, len(texts), batch)])


def _recall(retriever, featurizer, docs, examples, store):
  queries = _embed(retriever, featurizer, [e.question for e in examples])
  rows, _ = retrieval_recall.top_k(queries, docs, 20)
  metrics = retrieval_recall.evaluate_rankings(rows, examples, store, (5, 20)).metrics
  return metrics["recall@5"], metrics["recall@20"]


def sweep_one(rate: float, store, docs, split, tokenizer):
  """Trains a fresh query tower at `rate`; prints and returns dev recall after each epoch."""
  tf.keras.utils.set_random_seed(_SEED.value)
  retriever = presets.build_retriever(
      presets.encoder_config("minilm_l6", tokenizer.vocab_size), share_towers=False,
      bert_weights="minilm")
  featurizer = QueryFeaturizer(tokenizer, seq_length=_QUERY_LENGTH.value)
  start = _recall(retriever, featurizer, docs, split.dev, store)
  print(f"lr {rate:g} epoch 0: dev recall@5 {start[0]:.4f}, recall@20 {start[1]:.4f}",
        flush=True)
  candidates, _ = retrieval_recall.top_k(
      _embed(retriever, featurizer, [e.question for e in split.train]), docs, _K.value)
  hits = retrieval_recall.retrieved_has_answer(candidates, split.train, store.texts)
  keep = hits.any(1)  # questions without an answer-bearing candidate give no signal
  train = [e for e, k in zip(split.train, keep) if k]
  candidates, hits = candidates[keep], hits[keep]
  steps = _EPOCHS.value * (len(train) // _BATCH.value)
  optimizer = create_optimizer(OptimizerConfig(learning_rate=rate, num_train_steps=steps,
                                               warmup_steps=max(1, steps // 10)))
  doc_table = tf.constant(docs)
  variables = retriever.query_encoder.trainable_variables

  @tf.function
  def step(features, rows, found):
    with tf.GradientTape() as tape:
      query = retriever.embed_query(features, training=True)  # [B, D]
      logits = tf.einsum("bd,bkd->bk", query, tf.gather(doc_table, rows))  # [B, K]
      log_probs = tf.nn.log_softmax(logits)
      loss = -tf.reduce_mean(tf.reduce_logsumexp(tf.where(found, log_probs, -1e9), 1))
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients([(g, v) for g, v in zip(gradients, variables) if g is not None])
    return loss

  rng = np.random.default_rng(_SEED.value)
  results = [start]
  for epoch in range(1, _EPOCHS.value + 1):
    order = rng.permutation(len(train))
    for begin in range(0, len(order) - _BATCH.value + 1, _BATCH.value):
      batch = order[begin:begin + _BATCH.value]
      step(featurizer(tf.constant([train[i].question for i in batch])),
           tf.constant(candidates[batch]), tf.constant(hits[batch]))
    results.append(_recall(retriever, featurizer, docs, split.dev, store))
    print(f"lr {rate:g} epoch {epoch}: dev recall@5 {results[-1][0]:.4f}, "
          f"recall@20 {results[-1][1]:.4f}", flush=True)
  return results


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  path = os.path.join(_CACHE.value, "embeddings", "raw_minilm.npy")
  if not os.path.exists(path):
    raise app.UsageError(f"{path} is missing: run `python bench/real_data.py "
                         "--rows=raw_minilm` first")
  store = Corpus.load(os.path.join(_CACHE.value, "corpus", "blocks"))
  docs = np.load(path)
  docs /= np.linalg.norm(docs, axis=1, keepdims=True)
  split = questions.answerable_split(store.texts)
  tokenizer = pretrained.minilm_tokenizer()
  started = time.perf_counter()
  for rate in _RATES.value:
    sweep_one(float(rate), store, docs, split, tokenizer)
  print(f"{time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
  app.run(main)
