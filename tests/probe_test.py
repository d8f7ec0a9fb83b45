"""Knowledge probing (`realm_tf.probing.probe_lib`, `realm-probe`) on a tiny random REALM saved
as a pre-training model directory: its numbers against numpy, the binary's output and its bad
input. That probing follows an edited fact is checked on a trained REALM in
`probe_edit_test.py`."""
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import errors
from realm_tf import presets
from realm_tf import tiny_world
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiment_config import EXPERIMENT_FILE
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.models.saving import save_model
from realm_tf.probing import probe_lib
from realm_tf.retrieval.corpus import Corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY_LENGTH, BLOCK_LENGTH = 16, 24
TEXTS = ("ada lives in the city of [MASK] .", "[MASK] lives in the city of [MASK] .")
TOKENIZER = tiny_world.tokenizer()


def _pack(first, second, length):
  """[CLS] first [SEP] (second [SEP]) -> (ids, mask, type ids) int32 [length], by hand."""
  ids = [TOKENIZER.cls_id] + first + [TOKENIZER.sep_id]
  types = [0] * len(ids)
  if second is not None:
    ids += second + [TOKENIZER.sep_id]
    types += [1] * (len(second) + 1)
  pad = length - len(ids)
  return ids + [0] * pad, [1] * len(ids) + [0] * pad, types + [0] * pad


def _features(rows):
  return {name: tf.constant([row[i] for row in rows], tf.int32)
          for i, name in enumerate(("input_word_ids", "input_mask", "input_type_ids"))}



@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """A tiny random retriever and reader saved as `realm-pretrain` leaves them, with the
  step-0 index of the tiny world's corpus published."""
  root = tmp_path_factory.mktemp("probe")
  corpus_dir, vocab = tiny_world.write_pipeline_and_vocab(root / "world")
  store = Corpus.load(str(corpus_dir))
  tf.keras.utils.set_random_seed(0)
  retriever, reader = presets.build_models(tiny_world.model_config(), share_towers=True)
  model_dir = root / "model"
  save_model(retriever, str(model_dir / "retriever"))
  save_model(reader, str(model_dir / "reader"))
  base = registry.get("pretrain")
  task = dataclasses.replace(base.task, corpus=str(corpus_dir), vocab_file=str(vocab),
                             model=presets.ModelConfig(query_length=QUERY_LENGTH,
                                                       block_length=BLOCK_LENGTH))
  overrides.write_file(dataclasses.replace(base, task=task), str(model_dir / EXPERIMENT_FILE),
                       experiment="pretrain")
  blocks = [_pack(store.title_ids.row(r).tolist(), store.body_ids.row(r).tolist(), BLOCK_LENGTH)
            for r in range(len(store))]
  index_publisher.publish(BruteForceIndex(retriever.embed_documents(_features(blocks)).numpy()),
                          str(model_dir / "index"), index_publisher.version_for_step(0),
                          {"corpus_fingerprint": store.fingerprint})
  return str(model_dir)


@pytest.fixture(scope="module")
def published(model_dir):
  """The model directory's prober over its published index, 3 blocks a text."""
  return probe_lib.load_prober(model_dir, k=3)


def _log_softmax(x, axis=-1):
  x = x - x.max(axis=axis, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def test_probe_matches_numpy(published):
  """Retrieval, p(z|x), p(y|z,x), the marginal in both forms, RU and the null-only p(y|x)
  against numpy over the towers' raw embeddings and MLM logits of inputs packed by hand; one
  batch holds texts with one and with two masks."""
  sequence = published
  assert sequence.mlm_loss == "sequence"  # the run's form: the default
  retriever, reader, store = sequence.retriever, sequence.reader, sequence.corpus
  prober = probe_lib.Prober(retriever, reader, sequence.tokenizer, store, sequence.index,
                            QUERY_LENGTH, BLOCK_LENGTH, k=3, mlm_loss="token")
  blocks = [_pack(store.title_ids.row(r).tolist(), store.body_ids.row(r).tolist(), BLOCK_LENGTH)
            for r in range(len(store))] + [_pack([], [], BLOCK_LENGTH)]  # last: ∅
  documents = retriever.embed_documents(_features(blocks)).numpy().astype(np.float64)
  for text, probe, whole in zip(TEXTS, prober.probe_many(TEXTS), sequence.probe_many(TEXTS)):
    x = [TOKENIZER.mask_id if w == "[MASK]" else TOKENIZER.token_to_id(w) for w in text.split()]
    positions = [i + 1 for i, t in enumerate(x) if t == TOKENIZER.mask_id]
    query = retriever.embed_query(_features([_pack(x, None, QUERY_LENGTH)])).numpy()[0]
    top = np.argsort(-(documents[:-1] @ query))[:3]
    rows = [len(store)] + top.tolist()
    assert [e.block_id for e in probe.evidence] == [None] + store.block_ids[top].tolist()
    log_prior = _log_softmax(documents[rows] @ query)  # [K]
    bodies = [[]] + [store.body_ids.row(r).tolist() for r in top]
    logits = reader.mlm_logits(_features([_pack(x, b, QUERY_LENGTH + BLOCK_LENGTH)
                                          for b in bodies]), [positions] * len(rows))
    log_probs = _log_softmax(logits.numpy().astype(np.float64))  # [K, M, V]
    marginal = np.log(np.exp(log_prior[:, None, None] + log_probs).sum(0))  # [M, V]
    y = marginal.argmax(-1)
    answer = log_probs[:, np.arange(len(y)), y].sum(-1)  # log p(y|z,x) [K]
    assert probe.tokens == tuple(TOKENIZER.id_to_token(int(t)) for t in y)
    np.testing.assert_allclose(probe.token_probabilities,
                               np.exp(marginal[np.arange(len(y)), y]), atol=1e-5)
    np.testing.assert_allclose(probe.probability, np.exp(marginal.max(-1).sum()), atol=1e-5)
    np.testing.assert_allclose(whole.probability, np.exp(log_prior + answer).sum(), atol=1e-5)
    assert whole.tokens == probe.tokens
    np.testing.assert_allclose([e.probability for e in probe.evidence], np.exp(log_prior),
                               atol=1e-5)
    np.testing.assert_allclose([e.answer_probability for e in probe.evidence], np.exp(answer),
                               atol=1e-5)
    np.testing.assert_allclose([e.retrieval_utility for e in probe.evidence],
                               answer - answer[0], atol=1e-5)
    np.testing.assert_allclose(probe.no_retrieval_probability, np.exp(answer[0]), atol=1e-5)
    assert probe.no_retrieval_tokens == tuple(
        TOKENIZER.id_to_token(int(t)) for t in log_probs[0].argmax(-1))
    np.testing.assert_allclose(probe.no_retrieval_tokens_probability,
                               np.exp(log_probs[0].max(-1).sum()), atol=1e-5)
    assert probe.filled.split() == [probe.tokens[positions.index(i + 1)] if t == "[MASK]"
                                    else t for i, t in enumerate(text.split())]


def test_corpus_swap_embeds_the_new_corpus_with_the_doc_tower(model_dir, published, tmp_path):
  """`corpus=`: the doc tower embeds the corpus into an exact index in memory, which probes as
  the published index of the same corpus does; tiny_world's updated corpus (Ada moved to
  Lima) is the one read."""
  same = probe_lib.load_prober(model_dir, corpus=published.corpus.directory, k=3)
  for a, b in zip(published.probe_many(TEXTS), same.probe_many(TEXTS)):
    assert a.tokens == b.tokens and [e.block_id for e in a.evidence] == [
        e.block_id for e in b.evidence]
    np.testing.assert_allclose([e.probability for e in a.evidence],
                               [e.probability for e in b.evidence], atol=1e-6)
  files = tiny_world.write_open_qa(str(tmp_path))
  swapped = probe_lib.load_prober(model_dir, corpus=files.new_corpus, k=16)
  evidence = {e.block_id: e.text for e in swapped.probe(TEXTS[0]).evidence}
  assert evidence.pop(None) == "" and len(evidence) == 16 and min(evidence) == 2000
  assert evidence[2000] == "Ada lives in Lima. Ada works as a tailor."


def _probe_binary(*args):
  return subprocess.run([sys.executable, "-m", "realm_tf.probe", *args], capture_output=True,
                        text=True, cwd=ROOT, timeout=600)


def test_binary_prints_a_table_per_text_and_json_holds_the_same_numbers(model_dir):
  result = _probe_binary(f"--model_dir={model_dir}", "--k=2", *TEXTS)
  assert result.returncode == 0, result.stderr[-3000:]
  prober = probe_lib.load_prober(model_dir, k=2)
  assert result.stdout == "\n\n".join(probe_lib.probe_texts(prober, TEXTS)) + "\n"
  table = result.stdout.split("\n\n")[0].splitlines()
  assert table[0] == f"x: {TEXTS[0]}" and table[1].startswith("y: ada lives in the city of ")
  assert table[4].split() == ["p(z|x)", "p(y|z,x)", "RU(z|x)", "block"]
  assert len(table) == 8 and "∅ (null document)" in table[5] and "+0.00" in table[5]
  for line, block_id in zip(table[6:], [e.block_id for e in prober.probe(TEXTS[0]).evidence[1:]]):
    assert f"#{block_id} " in line
  (line, second) = probe_lib.probe_texts(prober, TEXTS, as_json=True)
  record = json.loads(line)
  assert record["text"] == TEXTS[0] and len(record["evidence"]) == 3
  assert record["evidence"][0]["block_id"] is None
  assert sum(e["probability"] for e in record["evidence"]) == pytest.approx(1.0, abs=1e-5)
  assert len(json.loads(second)["tokens"]) == 2


def test_text_without_mask_is_one_line_and_exit_2(model_dir):
  result = _probe_binary(f"--model_dir={model_dir}", TEXTS[0], "ada lives in doha .")
  assert result.returncode == errors.EXIT_BAD_INPUT
  assert result.stdout == "" and "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      "realm-probe: text 2 'ada lives in doha .': has no [MASK]. Write [MASK] for each "
      "wordpiece to fill, e.g. 'Ada lives in [MASK] .'.")


def test_a_corpus_of_longer_blocks_than_the_model_is_refused(model_dir, tmp_path):
  path = tmp_path / "long.jsonl"
  path.write_text(json.dumps({"title": "ada", "text": " ".join(["ada lives in paris"] * 30)}),
                  encoding="utf-8")
  with pytest.raises(errors.InputError, match=f"reads blocks of {BLOCK_LENGTH} .*--block_length"):
    probe_lib.load_prober(model_dir, corpus=str(path))


def test_model_dir_without_towers_or_mlm_reader_names_it(model_dir, published, tmp_path):
  with pytest.raises(errors.InputError, match=f"{tmp_path}: no retriever/: not the model "
                     "directory of a finished REALM pre-training run"):
    probe_lib.load_prober(str(tmp_path))
  save_model(published.retriever, str(tmp_path / "retriever"))
  save_model(published.retriever, str(tmp_path / "reader"))
  with pytest.raises(errors.InputError, match="reader: holds a Retriever, not a REALM reader "
                     "with an MLM head"):
    probe_lib.load_prober(str(tmp_path))
  with pytest.raises(errors.InputError, match="more blocks than the corpus"):
    probe_lib.load_prober(model_dir, k=17)
