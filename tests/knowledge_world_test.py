"""The knowledge world: deterministic, sized by its config, X != Z, answers are spans of Z,
facts not guessable from their sentences, and files every stage reads unchanged."""
import collections
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.evaluation import has_answer
from realm_tf.knowledge_world import ablation_config
from realm_tf.knowledge_world import ablation_result
from realm_tf.knowledge_world import ablation_runner
from realm_tf.knowledge_world import ablation_stats
from realm_tf.knowledge_world import world as world_lib
from realm_tf.knowledge_world.world import WorldConfig
from realm_tf.knowledge_world.world import generate_world
from realm_tf.knowledge_world.writer import write_world
from realm_tf.qa.datasets import load_examples
from realm_tf.retrieval.corpus import Corpus
from realm_tf.training.ict_data import IctCorpus
from realm_tf.training.pretraining_data import masked_query_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = WorldConfig(num_entities=30, docs_per_entity=2, x_sentences_per_fact=2, seed=3)


@pytest.fixture(scope="module")
def world():
  return generate_world(CONFIG)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  return write_world(str(tmp_path_factory.mktemp("world")), CONFIG)


def test_deterministic_in_the_seed(world):
  again = generate_world(CONFIG)
  assert again == world
  other = generate_world(dataclasses.replace(CONFIG, seed=4))
  assert [e.name for e in other.entities] != [e.name for e in world.entities]


@pytest.mark.parametrize("num_entities,docs,x_per_fact", [(8, 1, 1), (30, 2, 2), (50, 4, 4)])
def test_sized_by_the_config(num_entities, docs, x_per_fact):
  config = WorldConfig(num_entities=num_entities, docs_per_entity=docs,
                       x_sentences_per_fact=x_per_fact)
  w = generate_world(config)
  facts = len(world_lib.SALIENT_FACTS)
  assert len(w.entities) == num_entities
  assert len({e.name for e in w.entities}) == num_entities
  assert len(w.documents) == num_entities * docs
  assert len(w.sentences) == num_entities * facts * x_per_fact
  assert sum(len(q) for q in w.questions.values()) == num_entities * facts
  assert len(w.questions["test"]) == round(0.2 * num_entities * facts)
  for entity_docs in np.array_split(np.arange(len(w.documents)), num_entities):
    stated = [f for d in entity_docs for f in w.documents[d].facts]
    assert sorted(stated) == sorted(world_lib.SALIENT_FACTS)  # each fact stated once


def test_bad_configs_are_rejected():
  for bad in (dict(num_entities=2), dict(docs_per_entity=5), dict(x_sentences_per_fact=0),
              dict(test_fraction=0.0), dict(dev_fraction=0.5, test_fraction=0.5)):
    with pytest.raises(ValueError):
      WorldConfig(**bad)


def test_pre_training_corpus_differs_from_the_knowledge_corpus(world):
  z_text = [" ".join(world_lib.words(d.text)) for d in world.documents]
  for sentence in world.sentences:
    x = " ".join(world_lib.words(sentence.text.rstrip(" .")))
    assert not any(x in z for z in z_text), sentence.text
  z_frames = {t for ts in world_lib.Z_TEMPLATES.values() for t in ts}
  x_frames = {t for ts in world_lib.X_TEMPLATES.values() for t in ts}
  assert not z_frames & x_frames


def test_salient_spans_are_the_fact_values(world):
  labels = collections.Counter()
  for sentence in world.sentences:
    entity = world.entities[sentence.entity]
    assert sentence.span_text == entity.facts[sentence.fact]
    assert sentence.label == world_lib.FACT_LABELS[sentence.fact]
    assert entity.name in sentence.text  # the sentence names its person
    document = world.documents[sentence.document]
    assert document.entity == sentence.entity and sentence.fact in document.facts
    assert sentence.span_text in document.text  # the evidence block states it
    labels[sentence.label] += 1
  assert set(labels) == {"DATE", "GPE", "PERSON"}


def test_answers_are_spans_of_z_and_absent_from_questions(world):
  for split, questions in world.questions.items():
    assert questions, split
    for q in questions:
      stating = [d for d in world.documents if d.entity == q.entity and q.fact in d.facts]
      assert len(stating) == 1
      assert all(a in stating[0].text for a in q.answers)
      assert has_answer(stating[0].text, q.answers)
      assert not has_answer(q.question, q.answers)
  everything = [(q.entity, q.fact) for qs in world.questions.values() for q in qs]
  assert len(set(everything)) == len(everything)  # splits are disjoint


def test_facts_are_not_guessable_from_the_sentence(world):
  """Values are drawn independently of names: no value dominates a fact, and people who share
  a first name (or a template) do not share values more than chance."""
  n = len(world.entities)
  for fact in ("birth_date", "birth_place", "residence", "mentor"):
    values = collections.Counter(e.facts[fact] for e in world.entities)
    assert values.most_common(1)[0][1] <= max(3, 0.15 * n), (fact, values.most_common(3))
  by_first = collections.defaultdict(list)
  for e in world.entities:
    by_first[e.name.split()[0]].append(e.facts["birth_place"])
  same = sum(len(v) - len(set(v)) for v in by_first.values())
  assert same <= 0.1 * n
  for e, entity in enumerate(world.entities):
    assert entity.facts["mentor"] != entity.name


def test_written_files_feed_every_stage(files):
  tok = files.tokenizer()
  assert not [t for t in tok.vocabulary if t.startswith("##")]  # whole words only
  assert all(t == t.lower() for t in tok.vocabulary[5:])
  store = Corpus.load(files.directory)
  assert len(store) == files.num_blocks == 60
  assert np.all(np.diff(store.block_ids) > 0)
  assert len(IctCorpus(store, tok)) == len(store)  # every block has >= 2 sentences
  assert len(Corpus.load(files.directory)) == len(store)
  for split in ("train", "dev", "test"):
    examples = load_examples(getattr(files, split))
    assert examples and all(e.answers for e in examples)

  records = [formats.parse_pretraining_example(r) for r in
             tf.data.TFRecordDataset(os.path.join(files.directory, "examples-00000-of-00001"
                                                  ".tfrecord"))]
  assert len(records) == files.num_examples == 30 * 4 * 2
  for record in records:
    ids = record["query_ids"].numpy()
    start, end = int(record["span_start"]), int(record["span_end"])
    span = tok.detokenize(tf.constant(ids[start:end + 1])).numpy().decode()
    assert span == record["span_text"].numpy().decode().lower()
    row = store.rows([int(record["block_id"])])[0]
    assert record["span_text"].numpy().decode() in store.texts[row]
    assert tok.unk_id not in ids
  batch = next(iter(masked_query_dataset(files.directory, tok, 8, "salient_span",
                                         query_length=files.max_sentence_wordpieces + 2)))
  weights = batch["masked_lm_weights"].numpy()
  assert (weights.sum(-1) >= 1).all() and (weights.sum(-1) <= 3).all()
  with open(files.world_json, encoding="utf-8") as f:
    assert len(json.load(f)["entities"]) == 30


def test_generate_binary(tmp_path):
  out = subprocess.run([sys.executable, "-m", "realm_tf.knowledge_world.generate",
                        f"--output_dir={tmp_path}", "--num_entities=6", "--seed=1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
  assert json.loads(out.stdout[out.stdout.index("{"):])["num_blocks"] == 12
  assert sorted(os.listdir(tmp_path)) == sorted(
      ["vocab.txt", "blocks-00000-of-00001.tfrecord", "examples-00000-of-00001.tfrecord",
       "blocks.manifest.json", "examples.manifest.json",
       "train.jsonl", "dev.jsonl", "test.jsonl", "world.json"])


def _seed_result(seed, ict_recall, rows):
  return ablation_result.AblationResult(
      seed, [dict(variant=v, system=v, exact_match=em, zero_shot_recall=recall,
                  finetuned_recall=recall, pretrain_retrieval_utility=1.0, null_prior=0.0,
                  null_posterior=0.0, source_retrieved=0.5, minutes=1.0)
             for v, em, recall in rows], {}, {}, ict_recall, None)


def test_ablation_statistics_are_paired_over_seeds():
  results = [_seed_result(0, 0.30, [("no_retrieval", 0.0, float("nan")),
                                    ("realm", 0.10, 0.40)]),
             _seed_result(1, 0.50, [("no_retrieval", 0.0, float("nan")),
                                    ("realm", 0.20, 0.45)]),
             _seed_result(2, 0.40, [("no_retrieval", 0.0, float("nan")),
                                    ("realm", 0.15, 0.35)])]
  summary = {row["variant"]: row for row in ablation_stats.summarize(results)}
  assert summary["realm"]["exact_match"] == pytest.approx(0.15)
  assert summary["realm"]["exact_match_std"] == pytest.approx(0.05)
  found = {o.statement: o for o in ablation_stats.orderings(results)}
  assert set(found) == {"EM: REALM > no retrieval", "zero-shot R@5: REALM > ICT warm-start"}
  em = found["EM: REALM > no retrieval"]
  assert (em.margin, em.se, em.verdict) == (pytest.approx(0.15),
                                            pytest.approx(0.05 / 3 ** 0.5), "holds")
  recall = found["zero-shot R@5: REALM > ICT warm-start"]  # paired: +0.10, -0.05, -0.05
  assert recall.margin == pytest.approx(0.0, abs=1e-9)
  assert recall.se == pytest.approx(np.std([0.10, -0.05, -0.05], ddof=1) / 3 ** 0.5)
  assert ablation_stats.Ordering("s", "m", "a", "b", -0.1, 0.01, 3).verdict == "reversed"
  assert ablation_stats.Ordering("s", "m", "a", "b", 0.05, 0.03, 3).verdict == "not significant"
  assert ablation_stats.Ordering("s", "m", "a", "b", 0.0, 0.0, 3).verdict == "no difference"


def test_ablation_runs_follow_the_systems_they_serve():
  config = ablation_config.AblationConfig(output_dir="/tmp/unused",
                                          variants=("ict_retriever_realm_reader", "orqa"))
  assert config.pretraining_runs() == ["bert_pairs", "realm", "bert"]
  seed = config.for_seed(7)
  assert (seed.seed, seed.world.seed, os.path.basename(seed.output_dir)) == (7, 7, "seed-7")
  forms = ablation_config.AblationConfig(output_dir="x", variants=ablation_config.FORM_VARIANTS)
  assert forms.pretraining_runs() == ["bert_pairs", "realm_sequence_mlm", "realm"]
  assert ablation_config.AblationConfig(output_dir="x").variants == (
      ablation_config.TABLE_VARIANTS)  # the loss forms are off the default table
  with pytest.raises(ValueError, match="variants"):
    ablation_config.AblationConfig(output_dir="x", variants=("bogus",))
  with pytest.raises(ValueError, match="seeds"):
    ablation_config.AblationConfig(output_dir="x", seeds=(1, 1))


def test_finished_seeds_are_reused_only_with_the_same_settings(tmp_path, files):
  config = ablation_config.AblationConfig(output_dir=str(tmp_path), variants=("realm",),
                                          seeds=(4,)).for_seed(4)
  os.makedirs(config.output_dir)
  result = _seed_result(4, 0.25, [("realm", 0.5, 0.75)])
  result.world = files
  ablation_result.save_result(result, config)
  loaded = ablation_result.load_result(config)
  assert (loaded.seed, loaded.rows, loaded.ict_recall, loaded.world) == (
      4, result.rows, 0.25, files)
  assert ablation_result.load_result(dataclasses.replace(config, pretrain_steps=7)) is None
  assert ablation_result.load_result(config.for_seed(5)) is None
  assert ablation_result.load_result(dataclasses.replace(config, seeds=(4, 5))) is not None
  reused = ablation_runner.run_seeds(dataclasses.replace(config, output_dir=str(tmp_path)),
                                     log=lambda message: None)
  assert [r.rows for r in reused] == [result.rows]
  reused = ablation_runner.run_seeds(dataclasses.replace(config, output_dir=str(tmp_path)),
                                     processes=3, log=lambda message: None)  # nothing to run
  assert [r.rows for r in reused] == [result.rows]


def test_the_query_tower_fine_tunes_at_its_own_rate_when_asked(tmp_path):
  """`finetune_retriever_learning_rate` reaches fine-tuning's `trainer.retriever_learning_rate`
  (None: the reader's rate, as before); a seed run without it keeps its settings (reused)."""
  config = ablation_config.AblationConfig(
      output_dir=str(tmp_path), world=WorldConfig(num_entities=8), variants=("realm",),
      seeds=(0,)).for_seed(0)
  runner = ablation_runner.AblationRunner(config, log=lambda message: None)
  runner.write_world()
  default = runner.finetune_experiment("realm", str(tmp_path / "ft"), "init")
  assert default.trainer.retriever_learning_rate is None
  assert default.trainer.learning_rate == config.finetune_learning_rate
  own = dataclasses.replace(config, finetune_retriever_learning_rate=3e-4)
  runner.config = own
  tuned = runner.finetune_experiment("realm", str(tmp_path / "ft"), "init",
                                     {"trainer.eval_every": 10})
  assert (tuned.trainer.retriever_learning_rate, tuned.trainer.learning_rate,
          tuned.trainer.eval_every) == (3e-4, config.finetune_learning_rate, 10)
  assert "finetune_retriever_learning_rate" not in ablation_result._settings(config)
  assert ablation_result._settings(own)["finetune_retriever_learning_rate"] == 3e-4
  with pytest.raises(ValueError, match="finetune_retriever_learning_rate"):
    ablation_config.AblationConfig(output_dir="x", finetune_retriever_learning_rate=-1.0)
