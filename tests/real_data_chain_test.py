"""The real-data benchmark's training chain (`realm_tf.real_data.chain`) on 60 Wikipedia leads.

ICT and REALM pre-training take 2 steps each (float32); the checks are the chain's contracts:
pre-training starts from the ICT retriever, ORQA's initialisation holds the ICT retriever and
a MiniLM reader, each masking writes its own examples once for every seed, each MLM loss form
pre-trains its own stage from the same ICT run, and a finished stage is never trained again.
"""
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from pipelines import pretraining_examples_lib
from realm_tf import presets
from realm_tf import pretrained
from realm_tf.models.saving import load_model
from realm_tf.real_data import chain as chain_lib
from realm_tf.real_data import corpus

pytestmark = pytest.mark.slow


def _weights_equal(a, b):
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  cache_dir = str(tmp_path_factory.mktemp("chain"))
  corpus.prepare_corpus(os.path.join(cache_dir, "corpus"), num_docs=60, block_length=96)
  # Pre-training at learning rate 0 keeps its retriever at its initialisation.
  config = chain_lib.ChainConfig(block_length=96, query_length=32, ict_steps=2,
                                 ict_batch_size=4, mlm_warmup_steps=1, pretrain_steps=2,
                                 pretrain_batch_size=2, pretrain_learning_rate=0.0,
                                 num_candidates=4, refresh_every=1, compute_dtype="float32")

  def make(seed):
    return chain_lib.Chain(config, os.path.join(cache_dir, "corpus", "blocks"), cache_dir,
                           os.path.join(pretrained.minilm_dir(), "vocab.txt"),
                           pretrained.minilm_tokenizer().vocab_size, seed, log=lambda _: None)

  chain = make(0)
  realm_dir = chain.pretrain("salient_span")
  return cache_dir, config, make, chain, realm_dir


@pytest.fixture(scope="module")
def ict(world):
  """The ICT run's saved retriever."""
  return load_model(os.path.join(world[3].ict(), "retriever"))


def test_pretraining_starts_from_the_ict_retriever(world, ict):
  _, _, _, chain, realm_dir = world
  realm = load_model(os.path.join(realm_dir, "retriever"))
  assert _weights_equal(ict.get_weights(), realm.get_weights())
  raw = pretrained.minilm_retriever(head="sentence")
  assert not _weights_equal(raw.get_weights()[:5], ict.get_weights()[:5])  # ICT trained
  with open(os.path.join(realm_dir, chain_lib.DONE), encoding="utf-8") as f:
    assert json.load(f)["step"] == 2


def test_orqa_init_holds_the_ict_retriever_and_a_minilm_reader(world, ict):
  _, _, _, chain, _ = world
  init = chain.finetune_init("ict")
  assert init.checkpoint.endswith(os.path.join("orqa-init", "ckpt")) and not init.bert_weights
  retriever, reader = presets.build_models(chain.model, share_towers=init.checkpoint_share_towers)
  tf.train.Checkpoint(retriever=retriever, reader=reader).read(init.checkpoint).assert_consumed()
  assert _weights_equal(retriever.get_weights(), ict.get_weights())
  _, minilm_reader = presets.build_models(chain.model)
  presets.load_reader_weights(minilm_reader, "minilm")
  assert _weights_equal(reader.encoder.get_weights(), minilm_reader.encoder.get_weights())
  # A REALM stage is its own model directory.
  assert chain.finetune_init("realm-salient_span").checkpoint == chain.path("realm-salient_span")


def test_finished_stages_and_examples_are_not_run_again(world, monkeypatch):
  cache_dir, config, make, chain, realm_dir = world

  def fail(*args, **kwargs):
    raise AssertionError("ran again")

  monkeypatch.setattr(chain_lib, "run_experiment", fail)
  monkeypatch.setattr(pretraining_examples_lib, "run_pipeline", fail)
  assert chain.pretrain("salient_span") == realm_dir
  # Another seed shares the examples (and would train its own runs).
  other = make(1)
  assert other.run_dir != chain.run_dir and other.run_dir.endswith("-seed1")
  assert chain_lib.prepare_examples(other.corpus_dir, cache_dir, "salient_span",
                                    config.query_length) == chain_lib.examples_dir(
                                        cache_dir, "salient_span", config.query_length)
  with pytest.raises(AssertionError, match="ran again"):
    other.ict()


def test_each_masking_writes_its_own_examples(world):
  cache_dir, config, _, chain, _ = world
  random_dir = chain_lib.prepare_examples(chain.corpus_dir, cache_dir, "random_span",
                                          config.query_length)
  counters = {}
  for masking, directory in (("salient_span", chain_lib.examples_dir(
      cache_dir, "salient_span", config.query_length)), ("random_span", random_dir)):
    with open(os.path.join(directory, chain_lib.DONE), encoding="utf-8") as f:
      counters[masking] = json.load(f)
  assert counters["random_span"]["examples_" + pretraining_examples_lib.RANDOM_SPAN_LABEL] > 0
  assert counters["random_span"]["examples"] == counters["random_span"][
      "examples_" + pretraining_examples_lib.RANDOM_SPAN_LABEL]
  assert "examples_" + pretraining_examples_lib.RANDOM_SPAN_LABEL not in counters["salient_span"]
  assert counters["salient_span"]["examples"] > 0
  with pytest.raises(ValueError, match="masking"):
    chain_lib.prepare_examples(chain.corpus_dir, cache_dir, "random_token", config.query_length)


def test_the_sequence_mlm_form_pretrains_its_own_stage_from_the_same_ict(world):
  cache_dir, config, _, chain, realm_dir = world
  sequence = chain_lib.Chain(dataclasses.replace(config, mlm_loss="sequence"), chain.corpus_dir,
                             cache_dir, chain.vocab_file, chain.model.encoder.vocab_size, 0,
                             log=lambda _: None)
  assert sequence.run_dir == chain.run_dir  # one ICT run for both forms
  stage = sequence.realm_stage("salient_span")
  assert stage == "realm-salient_span-sequence_mlm"
  sequence_dir = sequence.pretrain("salient_span")
  assert sequence_dir == chain.path(stage) != realm_dir
  for directory, form in ((realm_dir, "token"), (sequence_dir, "sequence")):
    with open(os.path.join(directory, "experiment.json"), encoding="utf-8") as f:
      assert json.load(f)["task"]["mlm_loss"] == form
  assert sequence.finetune_init(stage).checkpoint == sequence_dir
  with pytest.raises(ValueError, match="realm-salient_span-sequence_mlm"):
    sequence.finetune_init("realm-salient_span")


def test_settings_key_the_run_directory():
  a = chain_lib.ChainConfig(compute_dtype="float32")
  assert chain_lib.ChainConfig(compute_dtype="float32").digest() == a.digest()
  assert chain_lib.ChainConfig(compute_dtype="float32", ict_steps=7).digest() != a.digest()
  assert a.settings()["compute_dtype"] == "float32"
  with pytest.raises(ValueError, match="pretrain_steps"):
    chain_lib.ChainConfig(pretrain_steps=0)
  with pytest.raises(ValueError, match="mlm_loss"):
    chain_lib.ChainConfig(mlm_loss="per_span")
  # The default block form keeps the digests of runs made before the setting; "body" is
  # its own run directory, and its retriever reads `[CLS] body [SEP]`.
  default = chain_lib.ChainConfig()
  assert chain_lib.ChainConfig(doc_input="title_body").digest() == default.digest()
  body = chain_lib.ChainConfig(doc_input="body")
  assert body.digest() != default.digest()
  assert chain_lib.Chain(body, "blocks", "cache", "vocab.txt", 100, 0).model.doc_input == "body"
  with pytest.raises(ValueError, match="doc_input"):
    chain_lib.ChainConfig(doc_input="title")
