"""Fine-tuning variants of the patent: the doc tower trains (its gradient applied, the blocks
read re-embedded in the step, the index refreshed from it synchronously or by the
asynchronous builder), and the null document among the blocks scored and read."""
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import tiny_world
from realm_tf.qa import open_qa_step
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.qa.index_snapshots import checkpoint_versions
from realm_tf.qa.model import ModelInfo
from realm_tf.qa.model import QAModel

from qa_finetune_test import tensorboard_scalars
from qa_finetune_test import tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_open_qa(str(tmp_path_factory.mktemp("world")))


def _doc_tower(retriever):
  return [v.numpy() for v in retriever.doc_encoder.trainable_variables +
          retriever.doc_projection.trainable_variables]


def test_doc_tower_trains_during_fine_tuning(world, tmp_path):
  tuner = FineTuner(tiny_config(world, str(tmp_path / "doc"), dev_data="", num_steps=4,
                                train_doc_tower=True), log=lambda message: None)
  batch = tuner.prepare_batch(tuner.train_examples[:4])
  k = tuner.num_read
  assert batch["fresh_input_word_ids"].shape[:2] == (4, k)  # the k blocks read, re-embedded
  inputs = {n: tf.constant(v) for n, v in batch.items()}
  doc_variables = open_qa_step.retriever_variables(tuner.retriever, True)[
      len(open_qa_step.query_tower_variables(tuner.retriever)):]
  assert doc_variables
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tuner._losses(inputs, training=False)[0])  # pylint: disable=protected-access
  gradients = tape.gradient(loss, doc_variables)
  assert sum(float(tf.reduce_sum(tf.abs(tf.convert_to_tensor(g)))) for g in gradients
             if g is not None) > 0
  # The fresh scores are the current doc tower's, not the index's rows.
  fresh = tuner.retriever.embed_candidates(
      {n: inputs[f"fresh_{n}"] for n in open_qa_step.QUERY_FEATURES}).numpy()
  # At step 0 the index is the doc tower's own: fresh and indexed embeddings agree.
  np.testing.assert_allclose(fresh, batch["block_embeddings"][:, :k], atol=1e-4)
  before = _doc_tower(tuner.retriever)
  result = tuner.run()
  assert np.all(np.isfinite(result.losses))
  after = _doc_tower(tuner.retriever)
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))  # applied
  frozen = FineTuner(tiny_config(world, str(tmp_path / "frozen"), dev_data="", num_steps=1),
                     log=lambda message: None)
  assert "fresh_input_word_ids" not in frozen.prepare_batch(frozen.train_examples[:4])


def _sync_config(world, model_dir):
  return tiny_config(world, model_dir, dev_data="", num_steps=5, train_doc_tower=True,
                     index_refresh_steps=2, checkpoint_every=3, keep_checkpoints=2)


@pytest.fixture(scope="module")
def sync_run(world, tmp_path_factory):
  """5 steps training the doc tower, its index refreshed in sync every 2 steps, checkpoints at
  steps 3 and 5 (both kept); returns the tuner and its index's embeddings before training."""
  tuner = FineTuner(_sync_config(world, str(tmp_path_factory.mktemp("sync"))),
                    log=lambda message: None)
  initial = tuner.doc_index.embeddings.copy()
  tuner.run()
  return tuner, initial


def test_doc_tower_refresh_in_sync_keeps_checkpoints_and_index_paired(world, sync_run):
  tuner, initial = sync_run
  model_dir = tuner.experiment.trainer.model_dir
  assert int(tuner.doc_snapshot_step.numpy()) == 4 and tuner.doc_index.snapshot_step == 4
  assert not np.allclose(initial, tuner.doc_index.embeddings)
  info = ModelInfo.read(model_dir)
  assert info.step == 5 and info.doc_index == "index/step-00000004"
  scalars = tensorboard_scalars(os.path.join(model_dir, "train"))
  assert scalars["index_version"] == {1: 0, 2: 0, 3: 2, 4: 2, 5: 4}
  assert scalars["index_staleness"] == {1: 0, 2: 1, 3: 0, 4: 1, 5: 0}
  # A restart resumes on the index its checkpoint used (no doc-tower check: it trained on).
  resumed = FineTuner(_sync_config(world, model_dir), log=lambda message: None)
  assert resumed.refresher.version == "step-00000004"


def test_kept_checkpoints_keep_their_indexes_through_swaps(sync_run):
  """A checkpoint saved before a swap keeps the index it names: the refresher prunes only the
  versions no kept (or best) checkpoint uses."""
  tuner, _ = sync_run
  versions = checkpoint_versions(tuner.loop.manager.checkpoints)
  assert versions == {"step-00000002", "step-00000004"}  # ckpt-3 and ckpt-5
  for version in versions:
    assert os.path.isdir(os.path.join(tuner.experiment.trainer.model_dir, "index", version)), (
        version)


@pytest.mark.slow
def test_async_refresh_swaps_during_fine_tuning_under_mirrored(world, tmp_path, monkeypatch):
  """The asynchronous refresh of pre-training in fine-tuning: doc-embedder snapshot, the
  index-builder process, publication, swap between steps; a staleness of at most 1 step makes
  the trainer wait for each build, so the swap steps are the same on any host. The JSONL
  corpus has no stored wordpieces, so the builder embeds the ones the trainer cached in its
  directory."""
  monkeypatch.setenv("PYTHONPATH", ROOT)
  model_dir = str(tmp_path / "async")
  tuner = FineTuner(tiny_config(world, model_dir, dev_data="", num_steps=5,
                                train_doc_tower=True, index_refresh_steps=2, refresh="async",
                                max_index_staleness=1, checkpoint_every=5),
                    strategy=tf.distribute.MirroredStrategy(["CPU:0"]),
                    log=lambda message: None)
  refresher = tuner.refresher
  tuner.run()
  assert tuner.doc_index.snapshot_step == 4 and refresher.swaps >= 2
  assert os.path.isdir(os.path.join(model_dir, "doc_embedder", "step-00000004"))
  scalars = tensorboard_scalars(os.path.join(model_dir, "train"))
  assert scalars["index_version"] == {1: 0, 2: 0, 3: 2, 4: 2, 5: 4}
  assert scalars["index_wait_seconds"][3] > 0 and scalars["index_wait_seconds"][2] == 0
  model = QAModel.load(model_dir)
  assert model.doc_index.snapshot_step == 4
  answer = model.system(k=2).answer([tiny_world.QUESTIONS[0][0]])[0]
  assert len(answer.evidence) == 2


def test_null_document_in_fine_tuning(world, tmp_path):
  tuner = FineTuner(tiny_config(world, str(tmp_path / "null"), dev_data="", num_steps=3,
                                null_document=True), log=lambda message: None)
  batch = tuner.prepare_batch(tuner.train_examples[:4])
  k, length = tuner.num_read, tuner.experiment.task.model.reader_length
  assert (batch["rows"][:, 0] == open_qa_step.NULL_ROW).all()
  assert batch["rows"].shape[1] == tuner.num_retrieved + 1
  assert not batch["has_answer"][:, 0].any()
  assert batch["read_positions"].shape == (4, k + 1) and (batch["read_positions"][:, 0] == 0).all()
  null_reader = batch["reader_input_word_ids"][:, 0]  # [CLS] question [SEP] [SEP]: no block
  assert null_reader.shape == (4, length) and not batch["reader_block_mask"][:, 0].any()
  assert batch["fresh_input_word_ids"].shape[1] == 1  # the null document's doc-tower input
  np.testing.assert_array_equal(batch["fresh_input_mask"][:, 0].sum(-1), 3)  # [CLS][SEP][SEP]
  inputs = {n: tf.constant(v) for n, v in batch.items()}
  with_null = tuner._losses(inputs, training=False)  # pylint: disable=protected-access
  assert np.isfinite(with_null[0].numpy()).all()
  # p(∅|x) takes retrieval mass, so the retriever loss is not the one without it.
  without = {n: v for n, v in batch.items() if not n.startswith("fresh_")}
  without.update(rows=batch["rows"][:, 1:], block_embeddings=batch["block_embeddings"][:, 1:],
                 has_answer=batch["has_answer"][:, 1:],
                 read_positions=batch["read_positions"][:, 1:] - 1,
                 **{n: v[:, 1:] for n, v in batch.items() if n.startswith(("reader_", "gold_"))})
  plain = tuner._losses({n: tf.constant(v) for n, v in without.items()}, training=False)  # pylint: disable=protected-access
  answered = batch["has_answer"].any(1)
  assert (with_null[1].numpy()[answered] > plain[1].numpy()[answered]).all()
  result = tuner.run()
  assert np.all(np.isfinite(result.losses))
