"""Google's released ORQA model, pre-trained embedder, index and blocks, end to end.

A bundle in exactly the released layouts (`released_bundle`): `orqa_nq_model_from_realm/`
(`params.json` naming gs:// paths, `export/best_default/checkpoint/model.ckpt-300` with
`global_step` and Adam slots), `cc_news_pretrained/embedder/` (`variables/variables`,
`assets/vocab.txt`, `encoded/encoded.ckpt` holding `block_emb`) and `enwiki-20181220/`
(`blocks.tfr`, `titles.tfr`), with random BERTs of 64-d heads. The oracle is the reference
REALM in `transformers==4.57.6`: `block_emb` is its `RealmEmbedder`'s embedding of
`[CLS] title [SEP] body [SEP]`, and `RealmForOpenQA` + `RealmRetriever` answer each question
(batch 1); `realm-evaluate` (batches of 3) and `realm-ask` run on the released directory as
the documentation says, and must retrieve the same blocks with the same scores (1e-4) and
give the same answers.
"""
# bazel-size: large
import dataclasses
import json
import os
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf

import released_bundle
from pipelines import pretraining_examples_lib
from pipelines.pretraining_examples_lib import ExamplesConfig
from realm_tf import checkpoints
from realm_tf import configs
from realm_tf.checkpoints import released_embeddings
from realm_tf.checkpoints import variable_maps
from realm_tf.evaluation import normalize_answer
from realm_tf.experiments import registry
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.models.saving import load_model
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models
from realm_tf.qa.doc_index import EmbeddingMismatchError
from realm_tf.qa import released_model
from realm_tf.qa.ask_lib import Asker

torch = pytest.importorskip("torch")
modeling = pytest.importorskip("transformers.models.deprecated.realm.modeling_realm")
RealmConfig = pytest.importorskip(
    "transformers.models.deprecated.realm.configuration_realm").RealmConfig
RealmRetriever = pytest.importorskip(
    "transformers.models.deprecated.realm.retrieval_realm").RealmRetriever
RealmTokenizer = pytest.importorskip(
    "transformers.models.deprecated.realm.tokenization_realm").RealmTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("ada lives in doha works as a tailor bob kyiv nurse pam lima pilot kim oslo baker "
         "who where what is the city of job does live").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + sorted(set(WORDS))
PEOPLE = [("Ada", "Doha", "tailor"), ("Bob", "Kyiv", "nurse"), ("Pam", "Lima", "pilot"),
          ("Kim", "Oslo", "baker")]
TITLES = [p for p, _, _ in PEOPLE] + [f"{p} (work)" for p, _, _ in PEOPLE]
TEXTS = ([f"{p} lives in {c}. {p} is a {j}." for p, c, j in PEOPLE] +
         [f"{p} works as a {j} in {c}." for p, c, j in PEOPLE])
QUESTIONS = [("where does ada live", ["Doha"]), ("what is the job of bob", ["nurse"]),
             ("who lives in lima", ["Pam"]), ("kim works as a", ["baker"])]
ENCODER = configs.EncoderConfig(vocab_size=len(VOCAB), hidden_size=64, num_layers=2,
                                num_attention_heads=1, intermediate_size=96)
CONFIG = ModelConfig(encoder=ENCODER, projection_size=16, span_hidden_size=24)
K = 5
TOL = 1e-4


def _perturbed(seed):
  retriever, reader = build_models(CONFIG)
  rng = np.random.default_rng(seed)
  for v in retriever.weights + reader.weights:
    v.assign(rng.normal(0.0, 0.2, v.shape).astype(np.float32) + (1.0 if "gamma" in v.name
                                                                 else 0.0))
  return retriever, reader


def _hf_config():
  return RealmConfig(vocab_size=len(VOCAB), hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=1, intermediate_size=96, hidden_act="gelu_new",
                     retriever_proj_size=16, span_hidden_size=24, max_span_width=10,
                     reader_beam_size=K, searcher_beam_size=K, num_block_records=len(TEXTS),
                     reader_seq_len=320)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
  """(the bundle's root, the reference RealmForOpenQA, its tokenizer)."""
  root = str(tmp_path_factory.mktemp("released"))
  pretrained, _ = _perturbed(1)
  finetuned, reader = _perturbed(2)
  paths = released_bundle.write_embedder(root, pretrained, VOCAB)
  tokenizer = RealmTokenizer(paths["vocab"])
  embedder = modeling.RealmEmbedder(_hf_config())
  modeling.load_tf_weights_in_realm(embedder, _hf_config(), paths["variables"])
  blocks = tokenizer(TITLES, TEXTS, padding=True, truncation=True, max_length=288,
                     return_tensors="pt")
  with torch.no_grad():
    block_emb = embedder.eval()(**blocks).projected_score.numpy()
  released_bundle.write_block_emb(paths["encoded"], block_emb)
  released_bundle.write_pretrained_bert(root, _perturbed(4)[1])
  released_bundle.write_block_records(os.path.join(root, "enwiki-20181220"), TITLES, TEXTS)
  checkpoint = released_bundle.write_orqa_model(root, "orqa_nq_model_from_realm", finetuned,
                                                reader, step=300)
  with open(os.path.join(root, "NaturalQuestions.resplit.test.jsonl"), "w") as f:
    for question, answers in QUESTIONS:
      f.write(json.dumps({"question": question, "answer": answers}) + "\n")
  hf = modeling.RealmForOpenQA(_hf_config(), retriever=RealmRetriever(
      np.array([t.encode() for t in TEXTS], dtype=object), tokenizer))
  modeling.load_tf_weights_in_realm(hf, _hf_config(), checkpoint)
  modeling.load_tf_weights_in_realm(hf, _hf_config(), paths["encoded"])
  return root, hf.eval(), tokenizer


def _reference_answers(hf, tokenizer):
  """{question: (block ids, retrieval scores, answer)} of the reference, one at a time."""
  out = {}
  for question, _ in QUESTIONS:
    ids = tokenizer([question], return_tensors="pt")
    with torch.no_grad():
      scores = torch.einsum("BD,QD->QB", hf.block_emb, hf.embedder(**ids)[0])[0]
      result = hf(**ids, return_dict=True)
    top = torch.topk(scores, K)
    out[question] = (top.indices.numpy(), top.values.numpy(),
                     tokenizer.decode(result.predicted_answer_ids))
  return out


@pytest.mark.slow
def test_the_released_model_answers_as_the_reference(bundle):
  root, hf, tokenizer = bundle
  model_dir = os.path.join(root, "orqa_nq_model_from_realm")
  assert released_model.is_released_dir(model_dir)
  asker = Asker(model_dir, k=K, index_kind="brute_force")
  assert asker.model.directory == model_dir + ".realm_tf"
  assert asker.model.info.step == 300
  reference = _reference_answers(hf, tokenizer)
  questions = [q for q, _ in QUESTIONS]
  scores, rows = asker.system.retrieve(questions, K)
  answers = asker.ask_many(questions)  # batches of several questions
  for i, question in enumerate(questions):
    ref_rows, ref_scores, ref_answer = reference[question]
    np.testing.assert_array_equal(rows[i], ref_rows)
    np.testing.assert_allclose(scores[i], ref_scores, atol=TOL, rtol=TOL)
    assert normalize_answer(answers[i].answer) == normalize_answer(ref_answer), question
  assert len({normalize_answer(a.answer) for a in answers}) > 1  # not one constant answer


@pytest.mark.slow
def test_realm_evaluate_and_ask_take_the_released_directory(bundle, tmp_path):
  root, hf, tokenizer = bundle
  reference = _reference_answers(hf, tokenizer)
  model_dir = os.path.join(root, "orqa_nq_model_from_realm")
  env = dict(os.environ, PYTHONPATH=ROOT)
  predictions = str(tmp_path / "predictions.jsonl")
  subprocess.run([sys.executable, "-m", "realm_tf.evaluate", f"--model_dir={model_dir}",
                  f"--data={os.path.join(root, 'NaturalQuestions.resplit.test.jsonl')}",
                  f"--predictions={predictions}", "--batch_size=3", "--index_kind=brute_force",
                  "--recall_ks=1,5"], check=True, env=env, cwd=str(tmp_path), timeout=600)
  with open(predictions) as f:
    records = [json.loads(line) for line in f]
  assert [normalize_answer(r["answer"]) for r in records] == [
      normalize_answer(reference[q][2]) for q, _ in QUESTIONS]
  asked = subprocess.run([sys.executable, "-m", "realm_tf.ask", f"--model_dir={model_dir}",
                          QUESTIONS[0][0]], check=True, env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=600)
  assert f"A: {records[0]['answer']!r}" in asked.stdout and " #0 Ada: " in asked.stdout


@pytest.mark.slow
def test_finetuning_from_the_pretrained_embedder_starts_on_its_released_index(bundle, tmp_path):
  """ORQA fine-tuning from `cc_news_pretrained`: the step-0 index is `block_emb` itself,
  checked on sampled blocks, not the corpus embedded again; another index is refused."""
  root, _, _ = bundle
  embedder = os.path.join(root, "cc_news_pretrained", "embedder")
  encoded = os.path.join(embedder, "encoded", "encoded.ckpt")
  base = registry.get("open_qa")

  def experiment(model_dir, index):
    return dataclasses.replace(
        base, task=dataclasses.replace(
            base.task, corpus=os.path.join(root, "enwiki-20181220", "blocks.tfr"),
            train_data=os.path.join(root, "NaturalQuestions.resplit.test.jsonl"),
            vocab_file=os.path.join(embedder, "assets", "vocab.txt"), model=CONFIG,
            init=InitConfig(realm_embedder=os.path.join(embedder, "variables", "variables"),
                            index=index),
            index_kind="brute_force", retriever_top_k=8, embedding_dtype="float32"),
        trainer=dataclasses.replace(base.trainer, model_dir=model_dir, num_steps=2,
                                    batch_size=2, checkpoint_every=2, log_every=1))

  model_dir = str(tmp_path / "finetuned")
  run_experiment(experiment(model_dir, encoded), verbose=False)
  stored = np.load(os.path.join(model_dir, "index", "step-00000000", "block_embeddings.npy"))
  block_emb, _ = released_embeddings.open_released_embeddings(encoded)
  np.testing.assert_array_equal(stored, block_emb)  # the release's rows, not re-embedded ones
  shuffled = released_bundle.write_block_emb(str(tmp_path / "shuffled" / "encoded.ckpt"),
                                             np.asarray(block_emb)[::-1])
  with pytest.raises(EmbeddingMismatchError, match=r"not the initial doc tower's embeddings"):
    run_experiment(experiment(str(tmp_path / "other"), shuffled), verbose=False)


@pytest.mark.slow
def test_pretraining_starts_from_the_released_towers_and_index(bundle, tmp_path):
  """REALM pre-training from `cc_news_pretrained` as docs/reproduce.md runs it: salient-span
  examples made from `blocks.tfr` itself, both towers from the released embedder and encoder,
  the step-0 index `block_emb` itself (not the corpus embedded again), its trainer searching
  it; another index is refused."""
  root, _, _ = bundle
  embedder = os.path.join(root, "cc_news_pretrained", "embedder")
  encoder = os.path.join(root, "cc_news_pretrained", "bert", "variables", "variables")
  encoded = os.path.join(embedder, "encoded", "encoded.ckpt")
  blocks = os.path.join(root, "enwiki-20181220", "blocks.tfr")
  vocab = os.path.join(embedder, "assets", "vocab.txt")
  examples = str(tmp_path / "examples")
  counters = pretraining_examples_lib.run_pipeline(beam.Pipeline(), ExamplesConfig(
      corpus_dir=blocks, output_dir=examples, vocab_file=vocab, min_sentence_wordpieces=3))
  assert counters["blocks_read"] == len(TEXTS) and counters["examples"] > 0
  base = registry.get("pretrain")

  def experiment(model_dir, index):
    return dataclasses.replace(
        base, task=dataclasses.replace(
            base.task, corpus=blocks, examples_dir=examples, vocab_file=vocab,
            model=dataclasses.replace(CONFIG, query_length=32),
            init=InitConfig(realm_embedder=os.path.join(embedder, "variables", "variables"),
                            realm_encoder=encoder, index=index),
            num_candidates=4, refresh="sync", refresh_every=100, index_kind="brute_force",
            embedding_dtype="float32"),
        trainer=dataclasses.replace(base.trainer, model_dir=model_dir, num_steps=2,
                                    batch_size=2, checkpoint_every=2))

  model_dir = str(tmp_path / "pretrained")
  result = run_experiment(experiment(model_dir, encoded), verbose=False)
  assert np.isfinite(result["loss"]) and result["index_snapshot_step"] == 0
  stored = np.load(os.path.join(model_dir, "index", "step-00000000", "block_embeddings.npy"))
  block_emb, _ = released_embeddings.open_released_embeddings(encoded)
  np.testing.assert_array_equal(stored, block_emb)  # the release's rows, not re-embedded ones
  assert not os.path.exists(os.path.join(model_dir, "mlm_warmup"))  # the encoder's MLM head
  reader = load_model(os.path.join(model_dir, "reader"))
  released = tf.train.load_checkpoint(encoder)
  trained = checkpoints.tf1_arrays(variable_maps.realm_encoder_map(reader))
  for name in ("bert/embeddings/word_embeddings", "cls/predictions/output_bias"):
    np.testing.assert_allclose(trained[name], released.get_tensor(name), atol=1e-3)  # 2 steps
  shuffled = released_bundle.write_block_emb(str(tmp_path / "shuffled" / "encoded.ckpt"),
                                             np.asarray(block_emb)[::-1])
  with pytest.raises(EmbeddingMismatchError, match=r"shuffled/encoded.ckpt.*not the initial "
                                                   r"doc tower's embeddings"):
    run_experiment(experiment(str(tmp_path / "other"), shuffled), verbose=False)


def test_released_files_that_do_not_fit_are_refused_naming_them(bundle, tmp_path):
  root, _, _ = bundle
  checkpoint = released_model.released_checkpoint(os.path.join(root, "orqa_nq_model_from_realm"))
  embedder = os.path.join(root, "cc_news_pretrained", "embedder")
  blocks = os.path.join(root, "enwiki-20181220", "blocks.tfr")
  short = released_bundle.write_block_records(str(tmp_path / "short"), TITLES[:-1], TEXTS[:-1])
  with pytest.raises(Exception, match=r"7 embeddings for the 8 blocks|8 embeddings for the 7"):
    released_model.import_released(checkpoint, embedder, short, str(tmp_path / "a"),
                                   index_kind="brute_force")
  other_vocab = tmp_path / "other" / "assets" / "vocab.txt"
  other_vocab.parent.mkdir(parents=True)
  other_vocab.write_text("\n".join(VOCAB + ["extra"]) + "\n")
  with pytest.raises(Exception, match=r"vocab.txt: .* wordpieces, but .*model.ckpt-300"):
    released_model.import_released(checkpoint, str(tmp_path / "other"), blocks,
                                   str(tmp_path / "b"))
  other, _ = _perturbed(3)  # another embedder, beside the bundle's index
  paths = released_bundle.write_embedder(str(tmp_path / "another"), other, VOCAB)
  released_bundle.copy_tree(os.path.join(embedder, "encoded"),
                            os.path.dirname(paths["encoded"]))
  with pytest.raises(Exception, match=r"encoded.ckpt.data-00000-of-00001 were not made by the "
                                      r"doc embedder .*the embedder .*another/cc_news_pretrained"):
    released_model.import_released(checkpoint, os.path.dirname(os.path.dirname(
        paths["variables"])), blocks, str(tmp_path / "c"), index_kind="brute_force")
  moved = tmp_path / "alone" / "orqa_nq_model_from_realm"
  released_bundle.copy_tree(os.path.join(root, "orqa_nq_model_from_realm"), str(moved))
  with pytest.raises(FileNotFoundError, match=r"cc_news_pretrained/embedder: not found"):
    released_model.model_directory(str(moved))
