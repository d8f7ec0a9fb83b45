"""REALM pre-training: candidates, masked inputs, the training step with index refresh,
bad input, and the ICT warm-start."""
import dataclasses
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import emulation
from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import IctTaskConfig
from realm_tf.experiment_config import PretrainTaskConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.models import precision
from realm_tf.presets import ModelConfig
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.training.candidates import CandidateBuilder
from realm_tf.training.ict_lib import train_ict
from realm_tf.training.pretraining_data import masked_query_dataset
from realm_tf.training.pretraining_lib import RealmPretrainer
import tiny_models

@pytest.fixture(scope="module")
def world(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("world"))
  store, tokenizer = tiny_world.write_pipeline(directory)
  return directory, store, tokenizer


def _refresher(index_root, every, store, tok, **options):
  """A synchronous exact index of `store` (24-wordpiece blocks) under `index_root`, rebuilt
  every `every` steps; `options`: `SynchronousRefresher`'s."""
  return SynchronousRefresher(str(index_root), every, store, (tok.cls_id, tok.sep_id, tok.pad_id),
                              "brute_force", 24, **options)


def _config(model_dir, examples_dir, num_steps=30, query_length=16, **task):
  """A pre-training experiment; `task`: other `PretrainTaskConfig` settings."""
  return ExperimentConfig(
      task=PretrainTaskConfig(**dict(dict(
          examples_dir=examples_dir, num_candidates=4,
          model=ModelConfig(query_length=query_length, block_length=24)), **task)),
      trainer=TrainerConfig(model_dir=model_dir, num_steps=num_steps, batch_size=8,
                            learning_rate=1e-3, checkpoint_every=10))


def test_candidate_selection(world):
  _, store, tok = world
  builder = CandidateBuilder(store, Featurizer(tok), num_candidates=4)
  assert builder.num_to_retrieve == 4  # 4 - null + excluded source
  retrieved = np.array([[3, 5, 7, 9], [2, 4, 6, -1]])
  selection = builder.select(retrieved, np.array([5, 8]))
  null = builder.null_row
  np.testing.assert_array_equal(selection.rows, [[null, 3, 7, 9], [null, 2, 4, 6]])
  np.testing.assert_array_equal(selection.mask, [[1, 1, 1, 1], [1, 1, 1, 1]])
  np.testing.assert_array_equal(selection.source_retrieved, [True, False])
  no_null = CandidateBuilder(store, Featurizer(tok), num_candidates=4, null_document=False,
                             exclude_source=False)
  selection = no_null.select(np.array([[3, 5, -1, -1]]), np.array([5]))
  np.testing.assert_array_equal(selection.rows, [[3, 5, null, null]])
  np.testing.assert_array_equal(selection.mask, [[1, 1, 0, 0]])


def test_candidate_features_pack_null_document_and_reader_input(world):
  _, store, tok = world
  builder = CandidateBuilder(store, Featurizer(tok, query_length=16, block_length=24,
                                               reader_length=40), num_candidates=2)
  query = tf.ragged.constant([[tok.token_to_id("ada"), tok.mask_id]], dtype=tf.int32)
  docs, reader = builder.features(tf.constant([[builder.null_row, 0]], tf.int64), query)
  cls, sep = tok.cls_id, tok.sep_id
  assert docs["input_word_ids"].shape == (1, 2, 24)
  np.testing.assert_array_equal(docs["input_word_ids"][0, 0, :4], [cls, sep, sep, 0])
  title = store.title_ids.row(0).tolist()
  assert docs["input_word_ids"][0, 1, 1:1 + len(title)].numpy().tolist() == title
  body = store.body_ids.row(0).tolist()
  expected = [cls] + query[0].numpy().tolist() + [sep] + body + [sep]
  assert reader["input_word_ids"][0, 1, :len(expected)].numpy().tolist() == expected
  np.testing.assert_array_equal(reader["input_word_ids"][0, 0, :5],
                                [cls] + query[0].numpy().tolist() + [sep, sep])


def test_corpus_smaller_than_k_is_an_error(world):
  _, store, tok = world
  with pytest.raises(errors.InputError, match="--num_candidates=17: needs 17 blocks retrieved "
                     "per query, and the corpus .* has only 16. Pass --num_candidates=16 or less"):
    CandidateBuilder(store, Featurizer(tok), num_candidates=17)


def test_trainer_candidates_are_the_serving_features(world):
  """One featurizer: for the same question and blocks, pre-training's candidate features
  (from the store's wordpieces) are exactly what serving and fine-tuning feed the doc tower
  (`blocks`) and the reader (`reader_inputs`, from the texts)."""
  _, store, tok = world
  featurizer = Featurizer(tok, query_length=12, block_length=24, reader_length=30)
  rows = np.array([[3, 0, 7]])
  builder = CandidateBuilder(store, featurizer, num_candidates=3, null_document=False,
                             exclude_source=False)
  _, query_ids = featurizer.questions(tf.constant(["who lives in the city of paris ?"]))
  docs, reader = builder.features(tf.constant(rows), query_ids)
  titles = np.array([store.titles[r] for r in rows[0]])
  texts = np.array([store.texts[r] for r in rows[0]])
  served_docs = featurizer.blocks(tf.constant(titles), tf.constant(texts))
  served = featurizer.reader_inputs(query_ids, tf.constant(titles[None]),
                                    tf.constant(texts[None]))
  assert set(reader) == {"input_word_ids", "input_mask", "input_type_ids"}
  for name in reader:
    np.testing.assert_array_equal(docs[name][0], served_docs[name])
    np.testing.assert_array_equal(reader[name][0], served[name])
  assert served["block_mask"].numpy().sum(axis=1).min() > 0


@pytest.mark.parametrize("strategy", ["salient_span", "random_token", "random_span",
                                      "spanbert"])
def test_masked_queries(world, strategy):
  directory, _, tok = world
  batch = next(iter(masked_query_dataset(directory, tok, 4, strategy, query_length=16)))
  weights = batch["masked_lm_weights"].numpy()
  assert (weights.sum(-1) > 0).all()
  ids = batch["query"]["input_word_ids"].numpy()
  for row in range(4):
    positions = batch["masked_lm_positions"][row][weights[row] > 0].numpy()
    assert (ids[row, positions] == tok.mask_id).all()
    length = int(batch["query_length"][row])
    np.testing.assert_array_equal(batch["query_ids"][row, :length], ids[row, 1:1 + length])
  if strategy == "salient_span":
    assert (weights.sum(-1) == 1).all()  # every tiny-world span is one wordpiece
    values = {tok.token_to_id(w) for w in tiny_world.CITIES + tiny_world.JOBS}
    assert set(batch["masked_lm_ids"].numpy()[weights > 0].tolist()) <= values


def test_masked_queries_bad_arguments(world, tmp_path):
  directory, _, tok = world
  with pytest.raises(ValueError, match="masking_strategy"):
    masked_query_dataset(directory, tok, 4, "whole_word")
  with pytest.raises(FileNotFoundError, match="examples-"):
    masked_query_dataset(str(tmp_path), tok, 4)


def test_pretraining_learns_and_swaps_indexes(world, tmp_path):
  directory, store, tok = world
  retriever, reader = tiny_models.retriever_and_reader()
  refresher = _refresher(tmp_path / "index", 10, store, tok)
  trainer = RealmPretrainer(_config(str(tmp_path / "run"), directory), retriever, reader,
                            store, tok, refresher)
  history = trainer.train(verbose=False)
  # The optimizer's slots are made before the first step, so the step is traced once.
  assert trainer._train_step.experimental_get_tracing_count() == 1  # pylint: disable=protected-access
  losses = [h["loss"] for h in history]
  assert len(history) == 30 and all(math.isfinite(x) for x in losses)
  # Seeds 0-3 fall by 0.29-0.38.
  assert np.mean(losses[-8:]) < np.mean(losses[:8]) - 0.1
  assert sorted({h["index_snapshot_step"] for h in history}) == [0, 10, 20]
  # None after the last step (30): no step would use it.
  assert sorted(os.listdir(tmp_path / "index")) == ["LATEST", "step-00000000", "step-00000010",
                                                   "step-00000020"]
  assert max(h["index_staleness"] for h in history) == 9
  assert all(-50 < h["retrieval_utility"] < 50 for h in history)


def test_reader_warmup_holds_the_retriever_then_trains_it(world, tmp_path):
  directory, store, tok = world
  retriever, reader = tiny_models.retriever_and_reader()
  start = [w.copy() for w in retriever.get_weights()]
  reader_start = [w.copy() for w in reader.get_weights()]
  trainer = RealmPretrainer(
      _config(str(tmp_path / "run"), directory, num_steps=4, reader_warmup_steps=4),
      retriever, reader, store, tok,
      _refresher(tmp_path / "index", 100, store, tok))
  history = trainer.train(verbose=False)
  assert all(math.isfinite(h["loss"]) for h in history)
  # Only AdamW's weight decay (lr x 0.01 per step) touches the retriever during the warm-up.
  for before, after in zip(start, retriever.get_weights()):
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-7)
  assert max(np.abs(b - a).max() for b, a in zip(reader_start, reader.get_weights())) > 1e-4
  # Resumed past the warm-up (same model_dir, more steps): the retriever now moves.
  RealmPretrainer(
      _config(str(tmp_path / "run"), directory, num_steps=6, reader_warmup_steps=4),
      retriever, reader, store, tok,
      _refresher(tmp_path / "index", 100, store, tok)).train(verbose=False)
  assert max(np.abs(b - a).max() for b, a in zip(start, retriever.get_weights())) > 1e-4


def test_null_document_alone_is_a_masked_lm_without_retrieval(world, tmp_path):
  directory, store, tok = world
  retriever, reader = tiny_models.retriever_and_reader()
  history = RealmPretrainer(
      _config(str(tmp_path / "run"), directory, num_steps=3, num_candidates=1,
              exclude_source=False),
      retriever, reader, store, tok,
      _refresher(tmp_path / "index", 100, store, tok)).train(verbose=False)
  assert [h["retrieval_utility"] for h in history] == [0.0, 0.0, 0.0]
  assert [h["null_prior"] for h in history] == [1.0, 1.0, 1.0]
  assert [h["source_retrieved"] for h in history] == [0.0, 0.0, 0.0]


def test_sequence_mlm_loss_trains_and_logs_per_document_retrieval_utility(world, tmp_path):
  """`mlm_loss="sequence"` (the paper's one-document-per-example marginal) trains from the same
  start to another first loss than the per-token form; both log Appendix D's RU(z|x) of the
  top retrieved block."""
  directory, store, tok = world
  first = {}
  for form in ("token", "sequence"):
    retriever, reader = tiny_models.retriever_and_reader()
    history = RealmPretrainer(
        _config(str(tmp_path / form), directory, num_steps=3, mlm_loss=form,
                masking="random_span"),  # several masks a query: the forms differ
        retriever, reader, store, tok,
        _refresher(tmp_path / f"index-{form}", 100, store, tok)).train(verbose=False)
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["top_document_ru"])
               for h in history)
    first[form] = history[0]
  assert first["token"]["top_document_ru"] == pytest.approx(first["sequence"]["top_document_ru"],
                                                            rel=1e-4)  # the same first read
  # An untrained reader's p(y_j|z,x) hardly depends on z, so the forms differ by ~1e-4 here,
  # 100x the float noise between two computations from the same numbers.
  assert abs(first["token"]["loss"] - first["sequence"]["loss"]) > 1e-5
  with pytest.raises(ValueError, match="mlm_loss must be one of"):
    PretrainTaskConfig(mlm_loss="per_block")


def test_unmaskable_examples_are_counted_not_nan(world, tmp_path):
  directory, store, tok = world
  retriever, reader = tiny_models.retriever_and_reader()
  refresher = _refresher(tmp_path / "index", 100, store, tok)
  # Queries cut to 3 wordpieces: most salient spans fall outside and cannot be masked.
  history = RealmPretrainer(_config(str(tmp_path / "run"), directory, num_steps=3,
                                    query_length=5), retriever, reader, store, tok,
                            refresher).train(verbose=False)
  assert all(math.isfinite(h["loss"]) for h in history)
  assert max(h["unmaskable"] for h in history) > 0


def test_index_of_another_dimension_is_rejected(world, tmp_path):
  directory, store, tok = world
  narrow = tiny_models.retriever()
  _refresher(tmp_path / "index", 10, store, tok).start(0, narrow)  # publishes an 8-dim index
  retriever, reader = tiny_models.retriever_and_reader()
  refresher = _refresher(tmp_path / "index", 10, store, tok)
  with pytest.raises(ValueError, match="index dim 8 != embedder dim 16"):
    RealmPretrainer(_config(str(tmp_path / "run"), directory, num_steps=1), retriever, reader,
                    store, tok, refresher).train(verbose=False)


def test_restart_rebuilds_indexes_published_after_the_resumed_checkpoint(world, tmp_path):
  """A run killed after publishing step 10's index but before checkpointing step 10 resumes at
  8: it uses the index of step 5 and rebuilds step 10 from its own weights."""
  _, store, tok = world
  retriever, _ = tiny_models.retriever_and_reader()
  root = str(tmp_path / "index")
  killed = _refresher(root, 5, store, tok)
  killed.start(0, retriever)
  assert killed.maybe_refresh(5, retriever) and killed.maybe_refresh(10, retriever)
  resumed = _refresher(root, 5, store, tok)
  resumed.start(8, retriever, resume_version="step-00000005")
  assert (resumed.version, resumed.snapshot_step) == ("step-00000005", 5)
  assert resumed.maybe_refresh(10, retriever) and resumed.version == "step-00000010"


def test_ict_learns_with_in_batch_negatives(world, tmp_path):
  _, store, tok = world
  # Random tiny towers start with near-identical [CLS] vectors (pre-trained BERT does not);
  # a wider init breaks that symmetry within a few dozen steps. Seeded: across seeds 0-5 the
  # last-10 mean after 100 steps ranged 0.66-1.73 (threshold 1.88), after 60 steps up to 1.85.
  tf.keras.utils.set_random_seed(0)
  retriever = tiny_models.retriever(
      dataclasses.replace(tiny_models.ENCODER, initializer_range=0.2), projection_size=16)
  metrics, history = train_ict(
      ExperimentConfig(task=IctTaskConfig(model=ModelConfig(query_length=12, block_length=24)),
                       trainer=TrainerConfig(model_dir=str(tmp_path), num_steps=100,
                                             batch_size=8, learning_rate=3e-3,
                                             checkpoint_every=50)),
      retriever, store, tok, verbose=False)
  losses = [h["loss"] for h in history]
  assert np.mean(losses[-10:]) < min(np.mean(losses[:10]), math.log(8)) - 0.2
  assert os.path.exists(tmp_path / "retriever" / "config.json")
  assert os.path.exists(tmp_path / "doc_embedder" / "saved_model.pb")


@emulation.bf16_compute
def test_bfloat16_steps_track_float32_losses(world, tmp_path):
  directory, store, tok = world

  def losses(compute_dtype):
    with precision.policy_scope(compute_dtype):
      retriever, reader = tiny_models.retriever_and_reader()
    refresher = _refresher(tmp_path / compute_dtype / "index", 5, store, tok,
                           compute_dtype=compute_dtype)
    history = RealmPretrainer(_config(str(tmp_path / compute_dtype / "run"), directory,
                                      num_steps=10), retriever, reader, store, tok,
                              refresher).train(verbose=False)
    return np.array([h["loss"] for h in history])

  full, half = losses("float32"), losses("bfloat16")
  assert np.isfinite(half).all() and len(half) == 10
  assert not np.array_equal(full, half)  # it did compute in bfloat16
  np.testing.assert_allclose(half, full, atol=0.05)


def test_refresher_embeds_a_jsonl_corpus_through_its_tokenizer(world, tmp_path):
  """A corpus without stored wordpieces (JSONL) is tokenized by the refresher's tokenizer: the
  same index as from the pipeline shards; without a tokenizer it is an InputError."""
  _, store, tok = world
  retriever, _ = tiny_models.retriever_and_reader()
  path = str(tmp_path / "corpus.jsonl")
  store.write_jsonl(path)
  jsonl = Corpus.load(path)
  assert jsonl.title_ids is None and jsonl.fingerprint == store.fingerprint
  from_shards = _refresher(tmp_path / "shards", 10, store, tok)
  from_jsonl = _refresher(tmp_path / "jsonl", 10, jsonl, tok, tokenizer=tok)
  from_shards.start(0, retriever)
  from_jsonl.start(0, retriever)
  np.testing.assert_allclose(from_jsonl.index.document_embeddings(),
                             from_shards.index.document_embeddings(), rtol=0, atol=1e-6)
  with pytest.raises(errors.InputError, match="no stored wordpieces"):
    _refresher(tmp_path / "none", 10, jsonl, tok).start(0, retriever)
