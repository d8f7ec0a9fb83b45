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
from realm_tf.qa.doc_index import EmbeddingMismatchError
from realm_tf.qa import released_imports
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
  return released_bundle.random_models(CONFIG, seed)


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
                                      r"doc tower of the embedder .*another/cc_news_pretrained"):
    released_model.import_released(checkpoint, os.path.dirname(os.path.dirname(
        paths["variables"])), blocks, str(tmp_path / "c"), index_kind="brute_force")
  moved = tmp_path / "alone" / "orqa_nq_model_from_realm"
  released_bundle.copy_tree(os.path.join(root, "orqa_nq_model_from_realm"), str(moved))
  with pytest.raises(FileNotFoundError, match=r"cc_news_pretrained/embedder: not found"):
    released_imports.model_directory(str(moved))


# Answer strings of spans inside words -------------------------------------------------------
# The bundle's released towers read another vocabulary of the same size (an id keeps its
# weights; the strings are wordpieces of longer words) over other blocks, so answers can start
# or end inside a word. The answer string is ORQA's; the blocks, scores, spans and wordpiece
# ids are those of the reference `RealmForOpenQA`, whose own string (the decoded wordpieces)
# differs (docs/reproduce.md, "Answer strings and the HF port").

BasicTokenizer = pytest.importorskip(
    "transformers.models.deprecated.realm.tokenization_realm").BasicTokenizer
SUBWORD_VOCAB = VOCAB[:7] + [
    "tor", "##quin", "##ton", "cart", "##ila", "##ge", "1", "53", "##6", "cafe", "zur", "##ich",
    "we", "##x", "##dun", "who", "wrote", "where", "is", "the", "in", "of", "what", "lives",
    "has", "pages", "##s"]
SUBWORD_TITLES = ["Torquinton", "Wexdun", "Café", "Cartilage", "Wexdun (work)", "Zürich"]
SUBWORD_TEXTS = ["Torquinton wrote Cartilage, 1,536 pages.", "Wexdun lives in Zürich.",
                 "Café Torquinton is in Zürich.", "Cartilage has 1,536 pages.",
                 "Wexdun wrote 🙂 in the Café.", "The cartilage of Wexdun."]
SUBWORD_QUESTIONS = ["who wrote cartilage", "where is the cafe", "what has 1,536 pages",
                     "who lives in zurich", "what is torquinton", "who wrote the pages"]
# (block text, first and last body wordpiece, ORQA's string, HF's decoded wordpieces).
# tor ##quin ##ton wrote cart ##ila ##ge , 1 , 53 ##6 pages .
# we ##x ##dun lives in zur ##ich .        we ##x ##dun wrote [UNK] in the cafe .
SUBWORD_SPANS = [
    (0, 0, 0, "Tor", "tor"),  # a word's first piece: that prefix, in the original case
    (0, 0, 1, "Torquinton", "torquin"),  # holds a ## piece: ORQA reads the whole word
    (0, 1, 2, "Torquinton", "##quinton"),  # starts inside the word
    (0, 0, 2, "Torquinton", "torquinton"),
    (0, 4, 5, "Cartilage", "cartila"),
    (0, 5, 7, "Cartilage ,", "##ilage ,"),
    (0, 8, 10, "1 , 53", "1 , 53"),  # punctuation: tokens joined by spaces in both
    (0, 10, 11, "536", "536"),
    (0, 11, 12, "536 pages", "##6 pages"),
    (1, 5, 5, "Zür", "zur"),  # accents: ORQA keeps them, HF's wordpieces lost them
    (1, 5, 6, "Zürich", "zurich"),
    (4, 4, 4, "🙂", "[UNK]"),
    (4, 7, 7, "Café", "cafe"),
    (4, 1, 3, "Wexdun wrote", "##xdun wrote"),
]
_READER_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


def _subword_bundle(root, directory):
  """The bundle's released model and embedder with `SUBWORD_VOCAB` over `SUBWORD_TEXTS`, in
  the released layout under `directory`: (the model directory, the reference RealmForOpenQA,
  its tokenizer)."""
  for name in ("orqa_nq_model_from_realm", "cc_news_pretrained/embedder/variables"):
    released_bundle.copy_tree(os.path.join(root, name), os.path.join(directory, name))
  embedder = os.path.join(directory, "cc_news_pretrained", "embedder")
  vocab = os.path.join(embedder, "assets", "vocab.txt")
  os.makedirs(os.path.dirname(vocab))
  with open(vocab, "w", encoding="utf-8") as f:
    f.write("\n".join(SUBWORD_VOCAB) + "\n")
  tokenizer = RealmTokenizer(vocab)
  config = _hf_config()
  config.num_block_records = len(SUBWORD_TEXTS)
  doc_tower = modeling.RealmEmbedder(config)
  modeling.load_tf_weights_in_realm(doc_tower, config,
                                    os.path.join(embedder, "variables", "variables"))
  blocks = tokenizer(SUBWORD_TITLES, SUBWORD_TEXTS, padding=True, return_tensors="pt")
  with torch.no_grad():
    block_emb = doc_tower.eval()(**blocks).projected_score.numpy()
  encoded = released_bundle.write_block_emb(os.path.join(embedder, "encoded", "encoded.ckpt"),
                                            block_emb)
  released_bundle.write_block_records(os.path.join(directory, "enwiki-20181220"),
                                      SUBWORD_TITLES, SUBWORD_TEXTS)
  model_dir = os.path.join(directory, "orqa_nq_model_from_realm")
  hf = modeling.RealmForOpenQA(config, retriever=RealmRetriever(
      np.array([t.encode() for t in SUBWORD_TEXTS], dtype=object), tokenizer))
  modeling.load_tf_weights_in_realm(hf, config, os.path.join(
      model_dir, "export", "best_default", "checkpoint", "model.ckpt-300"))
  modeling.load_tf_weights_in_realm(hf, config, encoded)
  return model_dir, hf.eval(), tokenizer


def _hf_read(hf, tokenizer, question):
  """The reference on one question, through its own modules: {"rows", "scores" [K];
  "input_ids", "block_mask" [K, L] of its reader; "span_logits" {(block, start, end): span
  logit without the retrieval score}; "answer" (block, start, end); "answer_ids"}."""
  ids = tokenizer([question], return_tensors="pt")
  with torch.no_grad():
    result = hf(**ids, return_dict=True).reader_output, hf(**ids).predicted_answer_ids
    scores, rows = torch.topk(torch.einsum("BD,QD->QB", hf.block_emb, hf.embedder(**ids)[0])[0],
                              K)
    inputs = hf.retriever(rows, ids.input_ids, None, max_length=hf.config.reader_seq_len)[3]
    block_mask = (inputs.special_tokens_mask.bool().logical_not() &
                  inputs.token_type_ids.bool())
    sequence = hf.reader.realm(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                               token_type_ids=inputs.token_type_ids)[0]
    logits, starts, ends = hf.reader.qa_outputs(sequence, block_mask)
  valid = block_mask[:, starts] & block_mask[:, ends]  # [K, S]
  output, answer_ids = result
  return {"rows": rows.numpy(), "scores": scores.numpy(), "input_ids": inputs.input_ids.numpy(),
          "block_mask": block_mask.numpy(),
          "span_logits": {(b, int(starts[s]), int(ends[s])): float(logits[b, s])
                          for b, s in zip(*np.nonzero(valid.numpy()))},
          "answer": (int(output.block_idx), int(output.start_pos), int(output.end_pos)),
          "answer_ids": answer_ids.numpy()}


def _orqa_answer(squad_lib, tokenizer, text, first, last):
  """ORQA's answer string (`get_predictions`) for body wordpieces first..last of `text`:
  BERT's `get_final_text` of the pieces joined by spaces in the original tokens holding them
  (BERT's basic split, original case) joined by spaces."""
  words = BasicTokenizer(do_lower_case=False).tokenize(text)
  pieces = [tokenizer.tokenize(word) for word in words]
  token_of = [n for n, word_pieces in enumerate(pieces) for _ in word_pieces]
  pred_text = " ".join([p for word_pieces in pieces for p in word_pieces][first:last + 1])
  orig_text = " ".join(words[token_of[first]:token_of[last] + 1])
  return squad_lib.get_final_text(pred_text, orig_text, do_lower_case=True)


@pytest.mark.slow
def test_answers_inside_words_are_orqas_strings_of_the_references_spans(bundle, tmp_path):
  """On the released layout with wordpieces of longer words: every retrieved block, retrieval
  score, span logit (1e-4), reader input and answer span (block, positions, wordpiece ids,
  probability) is the reference's; the answer string is ORQA's for that span, checked by a
  small ORQA rule (Model Garden's `get_final_text`) and by literal strings of spans that start
  or end inside a word, where HF's decoded wordpieces differ."""
  squad_lib = pytest.importorskip("official.nlp.data.squad_lib")
  model_dir, hf, tokenizer = _subword_bundle(bundle[0], str(tmp_path))
  system = Asker(model_dir, k=K, index_kind="brute_force").system
  questions = SUBWORD_QUESTIONS
  scores, rows = system.retrieve(questions, K)
  titles, texts = system.gather_blocks(rows)
  titles, texts = tf.constant(titles.astype(str)), tf.constant(texts.astype(str))
  _, query_ids = system.featurizer.questions(tf.constant(questions))
  inputs = {n: v.numpy() for n, v in system.featurizer.reader_inputs(query_ids, titles,
                                                                      texts).items()}
  logits, starts, ends = (t.numpy() for t in system.reader.span_logits(
      {n: inputs[n] for n in _READER_FEATURES}, inputs["block_mask"]))
  read = {n: v.numpy() for n, v in system.read(query_ids, titles, texts, scores,
                                                rows >= 0).items()}
  answers = system.answer(questions)
  inside_words = 0
  for q, question in enumerate(questions):
    ref = _hf_read(hf, tokenizer, question)
    np.testing.assert_array_equal(rows[q], ref["rows"])
    np.testing.assert_allclose(scores[q], ref["scores"], atol=TOL, rtol=TOL)
    length = ref["input_ids"].shape[1]
    ours = slice(q * K, (q + 1) * K)
    np.testing.assert_array_equal(inputs["input_word_ids"][ours, :length], ref["input_ids"])
    np.testing.assert_array_equal(inputs["block_mask"][ours, :length], ref["block_mask"])
    assert not inputs["input_mask"][ours, length:].any()
    span_logits = {(b, int(starts[s]), int(ends[s])): float(logits[q * K + b, s])
                   for b in range(K) for s in range(len(starts))
                   if inputs["block_mask"][q * K + b, starts[s]] and
                   inputs["block_mask"][q * K + b, ends[s]]}
    assert span_logits.keys() == ref["span_logits"].keys()
    np.testing.assert_allclose([span_logits[s] for s in ref["span_logits"]],
                               list(ref["span_logits"].values()), atol=TOL, rtol=TOL)
    block, start, end = (int(read[n][q]) for n in ("block", "span_start", "span_end"))
    assert (block, start, end) == ref["answer"], question
    np.testing.assert_array_equal(inputs["input_word_ids"][q * K + block, start:end + 1],
                                  ref["answer_ids"])
    joint = np.array([l + ref["scores"][b] for (b, _, _), l in ref["span_logits"].items()])
    np.testing.assert_allclose(read["probability"][q], np.exp(joint.max() - np.logaddexp.reduce(
        joint)), atol=TOL, rtol=TOL)
    body = int(np.argmax(ref["block_mask"][block]))
    text = SUBWORD_TEXTS[ref["rows"][block]]
    expected = _orqa_answer(squad_lib, tokenizer, text, start - body, end - body)
    assert answers[q].answer == read["answer"][q].decode() == expected, question
    pieces = tokenizer.convert_ids_to_tokens(ref["answer_ids"])
    after = tokenizer.convert_ids_to_tokens(ref["input_ids"][block, end + 1:end + 2])
    inside_words += pieces[0].startswith("##") or after[0].startswith("##")
  # Chosen spans, as strings: realm_tf's span text over the reference's reader inputs.
  spans = SUBWORD_SPANS
  chosen = tf.constant([[SUBWORD_TEXTS[t]] for t, _, _, _, _ in spans])
  _, query_ids = system.featurizer.questions(tf.constant(["who"] * len(spans)))
  inputs = system.featurizer.reader_inputs(query_ids, tf.fill(tf.shape(chosen), ""), chosen)
  got = system.featurizer.span_text(chosen[:, 0], inputs["input_word_ids"], inputs["block_mask"],
                                    [3 + first for _, first, _, _, _ in spans],
                                    [3 + last for _, _, last, _, _ in spans]).numpy()
  for i, (t, first, last, orqa, decoded) in enumerate(spans):
    ids = tokenizer("who", SUBWORD_TEXTS[t]).input_ids
    np.testing.assert_array_equal(inputs["input_word_ids"][i, :len(ids)], ids)
    assert got[i].decode() == orqa == _orqa_answer(squad_lib, tokenizer, SUBWORD_TEXTS[t],
                                                  first, last)
    assert tokenizer.decode(ids[3 + first:4 + last]) == decoded
  assert inside_words > 0  # the model's own answers too (4 of the 6 questions here)
