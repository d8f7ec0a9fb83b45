"""Training in bfloat16 (Keras mixed_bfloat16) against float32: losses over the same steps.

  python bench/precision_losses.py --num_steps=100

Each run builds its towers in one dtype (pre-training under `models.precision.policy_scope`,
fine-tuning through `runtime.compute_dtype`) with the same seed and data, once per dtype:
pre-training runs REALM steps (tiny BERT towers, K = 4, B = 4, a brute-force index refreshed
every 10 steps in the same dtype) over `bench/training_step_bench.py`'s synthetic corpus of
real-Wikipedia block lengths; fine-tuning runs `FineTuner` steps on `realm_tf.tiny_world`'s
Open-QA files, without dev evaluation. Reported per run, relative to the float32 run's first
loss: the largest and the mean absolute per-step loss difference, the largest difference of
10-step mean losses and that of the last 10 steps. Writes
bench/results/precision_losses.{md,json}.
"""
import os
import sys
import tempfile

import numpy as np
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from bench import bench_utils
from bench.training_step_bench import synthetic_world
from realm_tf import presets
from realm_tf.keras import keras
from realm_tf.models import precision
from realm_tf import tiny_world
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import PretrainTaskConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.training.pretraining_lib import RealmPretrainer
# pylint: enable=g-import-not-at-top,wrong-import-position

_STEPS = flags.DEFINE_integer("num_steps", 100, "Training steps per run.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of both runs.")


def pretraining_losses(directory: str, tokenizer, compute_dtype: str):
  """Per-step REALM pre-training losses with towers in `compute_dtype`."""
  store = Corpus.load(directory)
  keras.utils.set_random_seed(_SEED.value)
  encoder = presets.encoder_config("tiny", tokenizer.vocab_size)
  with precision.policy_scope(compute_dtype):
    retriever = presets.build_retriever(encoder)
    reader = presets.build_reader(encoder)
  run_dir = os.path.join(directory, compute_dtype)
  refresher = SynchronousRefresher(os.path.join(run_dir, "index"), 10, store,
                                   (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
                                   "brute_force", compute_dtype=compute_dtype)
  config = ExperimentConfig(
      task=PretrainTaskConfig(examples_dir=directory, num_candidates=4),
      trainer=TrainerConfig(model_dir=os.path.join(run_dir, "run"), num_steps=_STEPS.value,
                            batch_size=4, learning_rate=1e-3, checkpoint_every=10**6),
      runtime=RuntimeConfig(seed=_SEED.value))
  history = RealmPretrainer(config, retriever, reader, store, tokenizer, refresher).train(
      verbose=False)
  return np.array([h["loss"] for h in history])


def finetuning_losses(directory: str, compute_dtype: str):
  """Per-step Open-QA fine-tuning losses on the tiny world's Open-QA files in `compute_dtype`."""
  world = tiny_world.write_open_qa(os.path.join(directory, "world"))
  model = tiny_world.model_config()
  config = ExperimentConfig(
      task=OpenQATaskConfig(corpus=world.corpus, train_data=world.train,
                            vocab_file=world.vocab_file, dev_data="", model=model,
                            init=tiny_world.INIT,
                            retriever_top_k=16, index_kind="brute_force",
                            embedding_dtype="float32"),
      trainer=TrainerConfig(model_dir=os.path.join(directory, compute_dtype), batch_size=4,
                            num_steps=_STEPS.value, learning_rate=3e-3, warmup_steps=3,
                            eval_every=10**6, checkpoint_every=10**6, log_every=10**6),
      runtime=RuntimeConfig(seed=_SEED.value, compute_dtype=compute_dtype))
  keras.utils.set_random_seed(_SEED.value)
  return np.array(FineTuner(config, log=lambda message: None).run().losses)


def _windows(losses: np.ndarray, size: int = 10) -> np.ndarray:
  """Means of consecutive `size`-step windows."""
  return losses[:len(losses) // size * size].reshape(-1, size).mean(1)


def compare(name: str, full: np.ndarray, half: np.ndarray):
  scale = abs(float(full[0]))
  delta = np.abs(half - full)
  return {"run": name, "steps": len(full), "first loss (fp32)": float(full[0]),
          "last-10 mean fp32": float(full[-10:].mean()),
          "last-10 mean bf16": float(half[-10:].mean()),
          "max abs Δ / first": float(delta.max()) / scale,
          "mean abs Δ / first": float(delta.mean()) / scale,
          "max 10-step-mean abs Δ / first": float(np.abs(_windows(half) - _windows(full)).max())
                                          / scale,
          "last-10 Δ / first": abs(float(half[-10:].mean() - full[-10:].mean())) / scale}


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  rows = []
  with tempfile.TemporaryDirectory() as directory:
    tokenizer = synthetic_world(directory, 2000, 200, np.random.default_rng(_SEED.value))
    full, half = (pretraining_losses(directory, tokenizer, d) for d in ("float32", "bfloat16"))
    rows.append(compare("pre-training (REALM step)", full, half))
    print(rows[-1], flush=True)
    full, half = (finetuning_losses(directory, d) for d in ("float32", "bfloat16"))
    rows.append(compare("fine-tuning (Open-QA step)", full, half))
    print(rows[-1], flush=True)
  markdown = (f"{bench_utils.machine_line()}\n\n{_STEPS.value} steps per run, seed "
              f"{_SEED.value}, float32 vs bfloat16 towers (same data and initial weights):\n\n" +
              bench_utils.markdown_table(rows, list(rows[0])))
  print(markdown)
  print(bench_utils.write_results("precision_losses", rows, markdown))


if __name__ == "__main__":
  app.run(main)
