"""The `ask` front door: Python API, corpus swap, embedding checks, bad questions, CLI."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import emulation
import released_bundle
import untrained_model
from realm_tf import errors
from realm_tf.data import formats
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.presets import build_models
from realm_tf.qa import ask_lib
from realm_tf import tiny_world
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.doc_index import EmbeddingMismatchError
from realm_tf.qa.doc_index import index_corpus
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization import answer_text
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

QUESTION = tiny_world.QUESTIONS[0][0]  # "ada lives in the city of"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return untrained_model.shared(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """The (untrained) tiny model written as a QA model directory (0 fine-tuning steps)."""
  return untrained_model.shared(tmp_path_factory)[1]


@pytest.fixture(scope="module")
def asker(model_dir):
  return ask_lib.get_asker(model_dir)


def test_ask_returns_answer_probability_and_evidence(asker, model_dir, monkeypatch):
  answer = ask_lib.ask(QUESTION, model_dir=model_dir)
  assert answer.question == QUESTION and 0 < answer.probability <= 1
  assert len(answer.evidence) == 5 and 0 <= answer.block < 5
  assert answer.answer in answer_text.original_text(  # as ORQA: tokens joined by spaces
      [answer.evidence[answer.block].text]).numpy()[0].decode()
  assert sum(e.probability for e in answer.evidence) == pytest.approx(1, abs=1e-5)
  corpus = asker.model.corpus
  for evidence in answer.evidence:
    assert corpus.texts[int(np.flatnonzero(corpus.block_ids == evidence.block_id)[0])] == (
        evidence.text)
  monkeypatch.setenv(ask_lib.MODEL_ENV, model_dir)
  assert ask_lib.ask(QUESTION).answer == answer.answer
  assert ask_lib.get_asker() is asker  # cached
  monkeypatch.delenv(ask_lib.MODEL_ENV)
  with pytest.raises(ValueError, match="no model"):
    ask_lib.ask(QUESTION)
  text = ask_lib.format_answer(answer)
  assert text.startswith(f"Q: {QUESTION}\nA: ") and text.count("\n") == 6


def test_empty_and_over_long_questions(asker):
  for question in ("", "   "):
    with pytest.raises(ValueError, match="question 1: empty question"):
      asker.ask(question)
  long_question = QUESTION + " and" * 500
  answer = asker.ask(long_question)
  truncated = asker.ask(" ".join(long_question.split()[:14]))  # query length 16 - 2 specials
  assert answer.answer == truncated.answer
  assert [e.block_id for e in answer.evidence] == [e.block_id for e in truncated.evidence]
  assert answer.answer and np.isfinite(answer.probability)


def test_corpus_swap_without_retraining(world, model_dir, asker):
  swapped = ask_lib.Asker(model_dir, corpus=world.new_corpus)
  assert swapped.model.retriever is not asker.model.retriever
  new = Corpus.load(world.new_corpus)
  np.testing.assert_allclose(
      swapped.model.doc_index.embeddings,
      swapped.model.doc_embedder.embed_texts(new.titles, new.texts), atol=1e-6)
  answer = swapped.ask(QUESTION)
  assert all(2000 <= e.block_id < 3000 for e in answer.evidence)
  assert "Ada lives in Lima." in new.texts[0] and "Ada lives in Doha." not in " ".join(new.texts)
  # The fine-tuned towers are unchanged: same query embedding, same reader weights.
  for got, want in zip(swapped.model.reader.variables, asker.model.reader.variables):
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@emulation.bf16_compute
def test_answering_in_bfloat16(model_dir, asker):
  """compute_dtype="bfloat16": the query tower and the reader compute in bfloat16 (float32
  variables, the checkpoint's weights), scores and probabilities come back float32 and close."""
  half = ask_lib.Asker(model_dir, compute_dtype="bfloat16")
  assert half.model.reader.encoder.compute_dtype == "bfloat16"
  assert half.model.retriever.query_encoder.compute_dtype == "bfloat16"
  assert asker.model.reader.encoder.compute_dtype == "float32"
  np.testing.assert_array_equal(half.model.reader.get_weights()[0],
                                asker.model.reader.get_weights()[0])
  scores, rows = half.system.retrieve([QUESTION])
  full_scores, full_rows = asker.system.retrieve([QUESTION])
  assert scores.dtype == np.float32 and rows[0][0] == full_rows[0][0]
  np.testing.assert_allclose(scores, full_scores, atol=0.05 * np.abs(full_scores).max())
  answer = half.ask(QUESTION)
  assert 0 < answer.probability <= 1 and len(answer.evidence) == 5


def test_corpus_swap_embedded_in_bfloat16(world, model_dir, asker, tmp_path):
  """embedding_dtype="bfloat16": a bfloat16 copy of the doc embedder embeds the new corpus;
  its saved index records bfloat16 and passes the float32 embedder's check."""
  swapped = ask_lib.Asker(model_dir, corpus=world.new_corpus, embedding_dtype="bfloat16")
  new = Corpus.load(world.new_corpus)
  half = swapped.model.doc_index
  assert half.embedding_dtype == "bfloat16" and half.embeddings.dtype == np.float32
  assert swapped.model.doc_embedder.path != asker.model.doc_embedder.path
  full = asker.model.doc_embedder.embed_texts(new.titles, new.texts)
  assert not np.array_equal(half.embeddings, full)  # it did compute in bfloat16
  scale = max(1.0, float(np.max(np.abs(full))))
  np.testing.assert_allclose(half.embeddings, full, rtol=0, atol=0.04 * scale)
  assert all(2000 <= e.block_id < 3000 for e in swapped.ask(QUESTION).evidence)
  half.save(str(tmp_path / "half"))
  assert DocIndex.read_info(str(tmp_path / "half"))["embedding_dtype"] == "bfloat16"
  reused = ask_lib.Asker(model_dir, corpus=world.new_corpus,
                         embeddings_dir=str(tmp_path / "half"))  # float32 embedder
  np.testing.assert_array_equal(reused.model.doc_index.embeddings, half.embeddings)


def _write_pipeline_embeddings(directory, corpus, embeddings):
  os.makedirs(directory, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(directory, "embeddings-00000-of-00001.tfrecord")) as w:
    for block_id, vector in zip(corpus.block_ids, embeddings):
      w.write(formats.embedding_example(int(block_id), vector))


def test_precomputed_embeddings_are_checked_against_the_doc_embedder(world, model_dir, asker,
                                                                     tmp_path):
  new = Corpus.load(world.new_corpus)
  embedder = asker.model.doc_embedder
  own = embedder.embed_texts(new.titles, new.texts)
  # The embedding pipeline's shards, made by this model's doc embedder: accepted.
  _write_pipeline_embeddings(str(tmp_path / "good"), new, own)
  good = index_corpus(embedder, new, str(tmp_path / "good"), kind="brute_force")
  np.testing.assert_array_equal(good.embeddings, own)
  assert good.corpus_fingerprint == new.fingerprint
  # Another model's doc embedder (same vocabulary and sizes): a clear error from `ask`.
  other_retriever, _ = build_models(tiny_world.model_config())
  tokenizer = WordpieceTokenizer(list(tiny_world.VOCAB))
  other_path = export_doc_embedder(other_retriever, str(tmp_path / "other_embedder"),
                                   tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                                   block_length=32, tokenizer=tokenizer)
  DocIndex.build(DocEmbedder(other_path), new, "brute_force").save(str(tmp_path / "other"))
  with pytest.raises(EmbeddingMismatchError, match="were not made by the doc embedder"):
    ask_lib.Asker(model_dir, corpus=world.new_corpus, embeddings_dir=str(tmp_path / "other"))
  # Wrong dimension, shards that miss blocks, and an index of another corpus.
  _write_pipeline_embeddings(str(tmp_path / "dim"), new, np.zeros([len(new), 8], np.float32))
  with pytest.raises(EmbeddingMismatchError, match="dimension 8, but the doc embedder"):
    index_corpus(embedder, new, str(tmp_path / "dim"))
  _write_pipeline_embeddings(str(tmp_path / "short"), Corpus.load(world.corpus), own)
  with pytest.raises(EmbeddingMismatchError, match="16 blocks without an embedding"):
    index_corpus(embedder, new, str(tmp_path / "short"))
  with pytest.raises(EmbeddingMismatchError, match="built for another corpus"):
    index_corpus(embedder, new, os.path.join(model_dir, "index", "step-00000000"))


def test_released_block_emb_checkpoint_and_npy_are_an_index(world, model_dir, asker, tmp_path):
  """The released index form (`encoded/encoded.ckpt` holding `block_emb`, as ORQA writes it)
  and a `.npy`, checked against the doc embedder like any precomputed embeddings."""
  new = Corpus.load(world.new_corpus)
  embedder = asker.model.doc_embedder
  own = embedder.embed_texts(new.titles, new.texts)
  prefix = released_bundle.write_block_emb(str(tmp_path / "encoded" / "encoded.ckpt"), own)
  for path in (prefix, str(tmp_path / "encoded")):
    released = index_corpus(embedder, new, path, kind="brute_force", storage_dtype="float16")
    np.testing.assert_array_equal(released.embeddings, own.astype(np.float16))
  np.save(str(tmp_path / "block_emb.npy"), own)
  from_npy = ask_lib.Asker(model_dir, corpus=world.new_corpus,
                           embeddings_dir=str(tmp_path / "block_emb.npy"))
  np.testing.assert_array_equal(from_npy.model.doc_index.embeddings, own)
  assert all(2000 <= e.block_id < 3000 for e in from_npy.ask(QUESTION).evidence)
  shuffled = released_bundle.write_block_emb(str(tmp_path / "shuffled" / "encoded.ckpt"),
                                             own[::-1])
  with pytest.raises(EmbeddingMismatchError, match="encoded.ckpt.data-00000-of-00001 were not "
                                                   "made by the doc embedder"):
    index_corpus(embedder, new, shuffled)
  short = released_bundle.write_block_emb(str(tmp_path / "short" / "encoded.ckpt"), own[:-1])
  with pytest.raises(EmbeddingMismatchError, match=f"{len(new) - 1} embeddings for the "
                                                   f"{len(new)} blocks"):
    index_corpus(embedder, new, short)


def test_the_model_index_is_a_published_index_version(world, model_dir, asker, tmp_path):
  """One on-disk format: the QA model's index loads as a published version, and a version
  published the way pre-training publishes loads as a QA document index."""
  corpus = Corpus.load(world.corpus)
  version, index, metadata = index_publisher.load_latest(os.path.join(model_dir, "index"))
  assert version == "step-00000000" and metadata["corpus_fingerprint"] == corpus.fingerprint
  np.testing.assert_array_equal(index.document_embeddings(), asker.model.doc_index.embeddings)
  root = str(tmp_path / "pretraining_index")
  index_publisher.publish(BruteForceIndex(asker.model.doc_index.embeddings), root,
                          "step-00000007",
                          {"snapshot_step": 7, "corpus_fingerprint": corpus.fingerprint})
  loaded = DocIndex.load(os.path.join(root, "step-00000007"), corpus)
  assert loaded.snapshot_step == 7 and loaded.kind == "brute_force"
  np.testing.assert_array_equal(loaded.embeddings, asker.model.doc_index.embeddings)
  with pytest.raises(EmbeddingMismatchError, match="built for another corpus"):
    DocIndex.load(os.path.join(root, "step-00000007"), Corpus.load(world.new_corpus))


def test_damaged_block_embeddings_are_refused_naming_the_file(world, model_dir, asker,
                                                              tmp_path):
  """The model's index maps its block embeddings file; a truncated or damaged one, or one of
  another row count than the index and corpus, is one line naming it."""
  assert isinstance(asker.model.doc_index.embeddings, np.memmap)
  corpus = Corpus.load(world.corpus)
  copy = tmp_path / "index"
  shutil.copytree(os.path.join(model_dir, "index", "step-00000000"), copy)
  path = copy / "block_embeddings.npy"
  content = path.read_bytes()
  path.write_bytes(content[:-4])
  with pytest.raises(errors.InputError, match=r"block_embeddings\.npy: .*truncated") as raised:
    DocIndex.load(str(copy), corpus)
  assert "\n" not in str(raised.value)
  path.write_bytes(content[:-1] + bytes([content[-1] ^ 1]))
  with pytest.raises(errors.InputError, match=r"block_embeddings\.npy: .*sha256"):
    DocIndex.load(str(copy), corpus)
  np.save(path, np.zeros([len(corpus) - 1, asker.model.doc_index.dim], np.float32))
  with pytest.raises(errors.InputError, match=rf"block_embeddings\.npy: {len(corpus) - 1} "
                     rf"embeddings of dimension \d+, but the index has {len(corpus)} blocks"):
    DocIndex.load(str(copy), corpus)
  path.write_bytes(content)
  np.testing.assert_array_equal(DocIndex.load(str(copy), corpus).embeddings,
                                asker.model.doc_index.embeddings)


def test_an_old_format_doc_index_says_to_rebuild(world, model_dir, tmp_path):
  old = tmp_path / "doc_index-0"
  BruteForceIndex(np.ones([3, 8], np.float32)).save(str(old / "index"))
  np.save(old / "embeddings.npy", np.ones([3, 8], np.float32))
  (old / "info.json").write_text('{"corpus_fingerprint": "x", "num_blocks": 3, "dim": 8}')
  for load in (DocIndex.load, DocIndex.read_info,
               lambda d: index_corpus(None, Corpus.load(world.corpus), d)):
    with pytest.raises(errors.InputError, match="older layout.*Rebuild it: re-run fine-tuning "
                       ".*--num_train_steps=0"):
      load(str(old))


def test_interactive_loop(asker):
  output = []
  answered = ask_lib.interactive(asker, [QUESTION + "\n", "\n", "   \n", "quit\n", "ignored\n"],
                                 output.append)
  text = "".join(output)
  assert answered == 1 and text.count("question> ") == 4
  assert f"Q: {QUESTION}" in text and "ignored" not in text


def test_cli_behaviour_question_or_interactive(asker):
  output = []
  ask_lib.answer_or_interact(asker, [], [QUESTION + "\n"], output.append)
  interactive = "".join(output)
  output.clear()
  ask_lib.answer_or_interact(asker, [QUESTION], [], output.append)
  direct = "".join(output)
  assert interactive.startswith(f"question> Q: {QUESTION}")
  assert direct.startswith(f"Q: {QUESTION}\nA: ") and direct.split("\n")[1] in interactive
  with pytest.raises(ValueError, match="question 1: empty question"):
    ask_lib.answer_or_interact(asker, [" "], [], output.append)


def test_each_positional_argument_is_one_question():
  assert ask_lib.command_line_questions([], ["who wrote hamlet?", "where is elsinore?"]) == [
      "who wrote hamlet?", "where is elsinore?"]
  assert ask_lib.command_line_questions(["first?"], ["who", "wrote"]) == [
      "first?", "who", "wrote"]  # unquoted words are questions of their own
  assert ask_lib.command_line_questions([], []) == []  # interactive


def test_realm_ask_help_and_behaviour_agree_on_positional_arguments(model_dir):
  """`--help` says each positional argument is one question, asked after `--question`; a run
  answers exactly those questions, in that order."""
  run = lambda *args: subprocess.run([sys.executable, "-m", "realm_tf.ask", *args],
                                     capture_output=True, text=True, cwd=ROOT, timeout=600)
  helped = run("--help").stdout
  assert "Each positional argument is one question" in " ".join(helped.split())
  questions = [q for q, _ in tiny_world.QUESTIONS[:3]]
  asked = run(f"--model_dir={model_dir}", "--k=2", f"--question={questions[0]}", *questions[1:])
  assert asked.returncode == 0, asked.stderr[-2000:]
  assert [line[3:] for line in asked.stdout.splitlines() if line.startswith("Q: ")] == questions
  assert asked.stdout.count("\nA: ") == 3
