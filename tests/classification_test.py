"""Retrieval-augmented classification on the tiny world: the marginal likelihood against numpy,
a few end-to-end steps lower the loss and the evaluation writes each prediction's evidence,
the registered experiment runs, and bad data gives a one-line error naming the file and line."""
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.classification import data
from realm_tf.classification.trainer import ClassificationTrainer
from realm_tf.classification.trainer import PREDICTIONS_FILE
from realm_tf.experiment_config import ClassificationTaskConfig
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.experiments import registry
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.losses.classification_loss import classification_loss


def numpy_loss(retriever_logits, label_logits, mask, labels):
  """−log Σ_z softmax_z(f)[z] softmax_y(g[z])[y*], z over the unmasked blocks only."""
  losses = []
  for f, g, m, y in zip(retriever_logits, label_logits, mask, labels):
    p_z = np.exp(f[m] - f[m].max())
    p_z /= p_z.sum()
    p_y = np.exp(g[m] - g[m].max(-1, keepdims=True))
    p_y /= p_y.sum(-1, keepdims=True)
    losses.append(-np.log(np.sum(p_z * p_y[:, y])))
  return np.array(losses)


def test_loss_matches_numpy_and_reaches_the_retriever():
  rng = np.random.default_rng(0)
  f = rng.normal(size=[4, 6]) * 3
  g = rng.normal(size=[4, 6, 3]) * 2
  mask = rng.random([4, 6]) > 0.3
  mask[:, 0] = True  # the null document is always read
  labels = rng.integers(0, 3, size=4)
  f_t = tf.constant(f, tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(f_t)
    out = classification_loss(f_t, tf.constant(g, tf.float32), tf.constant(mask),
                              tf.constant(labels))
  np.testing.assert_allclose(out["loss"].numpy(), numpy_loss(f, g, mask, labels), rtol=1e-5)
  np.testing.assert_allclose(np.exp(out["log_p_y"].numpy()).sum(-1), 1.0, rtol=1e-5)
  gradient = tape.gradient(out["loss"], f_t).numpy()
  assert np.all(gradient[~mask] == 0) and np.abs(gradient[mask]).max() > 1e-3


def write_claims(path, people):
  """True and false claims about where `people` live: one of each per person."""
  cities = tiny_world.CITIES
  with open(path, "w", encoding="utf-8") as f:
    for i, person in enumerate(people):
      wrong = cities[(cities.index(person.city) + 1 + i % 3) % len(cities)]
      f.write(json.dumps({"text": f"{person.name} lives in {person.city} .",
                          "label": "true"}) + "\n")
      f.write(json.dumps({"text": f"{person.name} lives in {wrong} .", "label": "false"}) + "\n")
  return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  directory = tmp_path_factory.mktemp("classification")
  files = tiny_world.write_open_qa(str(directory))
  train = write_claims(str(directory / "train.jsonl"), tiny_world.PEOPLE[:4])  # one batch
  dev = write_claims(str(directory / "dev.jsonl"), tiny_world.PEOPLE[12:])
  return files, train, dev


def tiny_model():
  """The tiny world's towers without dropout: a few steps must move the loss."""
  model = tiny_world.model_config()
  return dataclasses.replace(model, encoder=dataclasses.replace(
      model.encoder, dropout_rate=0.0, attention_dropout_rate=0.0))


def experiment(world, model_dir, **task):
  files, train, dev = world
  return ExperimentConfig(
      task=ClassificationTaskConfig(**dict(dict(
          corpus=files.corpus, train_data=train, dev_data=dev, vocab_file=files.vocab_file,
          model=tiny_model(), reader_top_k=3, head_dropout=0.0), **task)),
      trainer=TrainerConfig(model_dir=model_dir, num_steps=16, batch_size=8, learning_rate=1e-3,
                            warmup_steps=1, eval_every=16, checkpoint_every=16),
      runtime=RuntimeConfig(compute_dtype="float32"))


def test_training_lowers_the_loss_and_evaluation_writes_the_evidence(world, tmp_path):
  trainer = ClassificationTrainer(experiment(world, str(tmp_path)), log=lambda message: None)
  assert trainer.labels == ("false", "true")
  examples = trainer.train_examples[:8]
  prepared = trainer.prepare([e.text for e in examples], trainer.train_ids[:8])
  assert prepared["rows"].shape == (8, 4) and np.all(prepared["rows"][:, 0] == -2)
  inputs = {n: tf.constant(v) for n, v in prepared.items()}
  before = float(tf.reduce_mean(trainer._eval_fn(inputs)["loss"]))
  metrics = trainer.run()
  after = float(tf.reduce_mean(trainer._eval_fn(inputs)["loss"]))
  assert after < before - 0.1, (before, after)  # measured 0.71 -> 0.55
  assert set(metrics) >= {"accuracy", "macro_f1", "step"} and metrics["examples"] == 8
  with open(os.path.join(str(tmp_path), PREDICTIONS_FILE), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  assert len(records) == 8 and {r["label"] for r in records} == {"true", "false"}
  for record in records:
    assert record["predicted"] in ("true", "false")
    assert abs(sum(record["p_labels"].values()) - 1) < 1e-4
    evidence = record["evidence"]
    assert len(evidence) == 3 and sum(e["p_z"] for e in evidence) <= 1 + 1e-5
    assert all(e["title"] in tiny_world.NAMES or e["row"] == -2 for e in evidence)
  with open(os.path.join(str(tmp_path), data.LABELS_FILE), encoding="utf-8") as f:
    assert json.load(f) == ["false", "true"]


def test_registered_experiment_runs_without_retrieval_and_resumes(world, tmp_path):
  """Two steps, then the same run asked for four: it goes on from its step-2 checkpoint."""
  files, train, dev = world

  def run(num_steps):
    return run_experiment(registry.build("classification", params_override=",".join([
        f"trainer.model_dir={tmp_path}", f"trainer.num_steps={num_steps}",
        "trainer.batch_size=4", "trainer.checkpoint_every=2",
        f"task.corpus={files.corpus}", f"task.train_data={train}", f"task.dev_data={dev}",
        f"task.vocab_file={files.vocab_file}", "task.model.encoder=tiny",
        "task.model.query_length=16", "task.model.block_length=32",
        "task.model.reader_length=48", "task.model.projection_size=16",
        "task.retrieval=none", "runtime.compute_dtype=float32"])), verbose=False)

  metrics = run(2)
  assert metrics["step"] == 2 and 0 <= metrics["accuracy"] <= 1
  with open(os.path.join(str(tmp_path), PREDICTIONS_FILE), encoding="utf-8") as f:
    evidence = json.loads(f.readline())["evidence"]
  assert [(e["row"], e["p_z"]) for e in evidence] == [(-2, 1.0)]
  metrics_file = os.path.join(str(tmp_path), "metrics.jsonl")
  with open(metrics_file, encoding="utf-8") as f:
    first = f.readlines()
  assert run(4)["step"] == 4
  with open(metrics_file, encoding="utf-8") as f:
    lines = f.readlines()
  # Steps 1-2 are not redone: their records (with their step times) stay as they were.
  assert lines[:2] == first and [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]


@pytest.mark.parametrize("line, problem", [
    ('{"text": "ada lives in doha .", "label": "maybe"}', "label 'maybe' is not one of"),
    ('{"text": "ada lives in doha ."', "not JSON"),
    ('{"text": "", "label": "true"}', 'non-empty string "text"'),
    ('{"text": "ada \\ud800 doha", "label": "true"}',
     '"text" holds the lone surrogate U+D800 at character 4. Write the character itself'),
])
def test_bad_line_names_the_file_and_line(world, tmp_path, line, problem):
  path = str(tmp_path / "dev.jsonl")
  with open(world[2], encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
    out.write(f.readline() + "\n" + line + "\n")
  with pytest.raises(errors.MalformedRecordError) as raised:
    ClassificationTrainer(experiment(world, str(tmp_path / "run"), dev_data=path),
                          log=lambda message: None)
  message = str(raised.value)
  assert message.startswith(f"{path}:3: ") and problem in message and "\n" not in message
