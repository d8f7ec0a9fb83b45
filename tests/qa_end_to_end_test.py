"""Fine-tune -> evaluate -> export -> ask, from docs/open_qa.md's commands, on the tiny
world; then every TF Hub export reloads in a fresh process without realm_tf and gives the
Keras models' outputs."""
# bazel-size: large
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import hub_fresh_process
from realm_tf.qa.evaluate_lib import read_predictions
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.retrieval.embedding import embedding_tolerance
from realm_tf.tokenization.featurizers import BlockFeaturizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "# Open-QA: fine-tune, evaluate, export, ask"  # docs/open_qa.md
QUESTIONS = ["ada lives in the city of", "bob works as a", "kim lives in the city of"]
TITLES = ["ada", "bob", ""]
TEXTS = ["Ada lives in Doha. Ada works as a tailor.", "Bob lives in Kyiv. Bob works as a nurse.",
         "Pam lives in Doha. Pam works as a pilot."]
MASKED = ["[MASK] lives in the city of doha .", "the [MASK] is [MASK] .", "no mask here"]

# Runs in a fresh interpreter that cannot import realm_tf at all.
FRESH_PROCESS = hub_fresh_process.script("""
    hub_dir, out_path, inputs_path = sys.argv[1:4]
    with open(inputs_path) as f:
      inputs = json.load(f)
    questions = tf.constant(inputs["questions"])
    titles, texts = tf.constant(inputs["titles"]), tf.constant(inputs["texts"])
    out = {}

    query = hub.load(hub_dir + "/query_embedder")
    features = query.signatures["tokenize"](questions=questions)
    out.update({"query_" + k: v.numpy() for k, v in features.items()})
    out["query_serving"] = query.signatures["serving_default"](questions=questions)["embeddings"]
    out["query_ids"] = query.signatures["embed_ids"](**features)["embeddings"]
    out["query_keras_layer"] = hub.KerasLayer(hub_dir + "/query_embedder")(questions)
    out["query_call_ids"] = query(dict(features))["embeddings"]
    preprocessor = hub.load(hub_dir + "/preprocessor")
    out["preprocessor_input_word_ids"] = preprocessor(questions)["input_word_ids"]
    out["query_trainable_weights"] = len(
        hub.KerasLayer(hub_dir + "/query_embedder", trainable=True).trainable_weights)

    doc = hub.load(hub_dir + "/doc_embedder")
    out["doc_texts"] = doc.signatures["embed_texts"](titles=titles, texts=texts)["embeddings"]
    out["doc_keras_layer"] = hub.KerasLayer(doc)({"titles": titles, "texts": texts})

    reader = hub.load(hub_dir + "/reader")
    read = reader.signatures["read_text"](questions=questions, titles=titles, texts=texts)
    out.update({"read_" + k: v for k, v in read.items()})
    span_inputs = {k: read[k] for k in ("input_word_ids", "input_mask", "input_type_ids",
                                        "block_mask")}
    out["span_keras_layer"] = hub.KerasLayer(reader)(span_inputs)["span_logits"]
    mlm = reader.signatures["mlm_text"](queries=tf.constant(inputs["masked"]), titles=titles,
                                        texts=texts)
    out.update({"mlm_" + k: v for k, v in mlm.items()})

    qa = hub.load(hub_dir + "/realm_qa")
    answers = qa.signatures["serving_default"](questions=questions)
    out.update({"qa_" + k: v for k, v in answers.items()})
    out["qa_ids_answer"] = qa.signatures["answer_ids"](**features)["answer"]
    out["qa_keras_layer_answer"] = hub.KerasLayer(qa)(questions)["answer"]
    try:
      qa(tf.constant(["  "]))
      out["empty_question_error"] = ""
    except tf.errors.InvalidArgumentError as e:
      out["empty_question_error"] = e.message
""")


def readme_commands() -> str:
  with open(os.path.join(ROOT, "docs", "open_qa.md"), encoding="utf-8") as f:
    readme = f.read()
  section = readme[readme.index(SECTION):]
  return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def quickstart_commands() -> str:
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  section = readme[readme.index("### Your own documents"):]
  return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def model(chain):
  """The fine-tuned model the README commands wrote (its best dev checkpoint)."""
  return QAModel.load(find_model_dir(os.path.join(chain[0], "model")))


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
  """Runs the README commands; returns (the QA directory, their stdout)."""
  qa_dir = str(tmp_path_factory.mktemp("qa"))
  env = dict(os.environ, QA=qa_dir, PYTHONUNBUFFERED="1",
             PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
  result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + readme_commands()],
                          cwd=qa_dir, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
  return qa_dir, result.stdout


@pytest.mark.slow
def test_readme_quickstart_answers_over_the_users_own_documents(chain, tmp_path):
  qa_dir, _ = chain
  env = dict(os.environ, MODEL=os.path.join(qa_dir, "model"),
             VOCAB=os.path.join(qa_dir, "vocab.txt"), WORK=str(tmp_path / "mine"),
             PYTHONPATH=ROOT, PATH=os.path.dirname(sys.executable) + os.pathsep +
             os.environ.get("PATH", ""))
  result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + quickstart_commands()],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=600, check=False)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
  assert os.path.exists(tmp_path / "mine" / "corpus" / "blocks.manifest.json")
  assert "Grace Hopper" in result.stdout and "Ada Lovelace" in result.stdout, result.stdout


@pytest.mark.slow
def test_readme_chain_trains_evaluates_exports_and_asks(chain, model):
  qa_dir, stdout = chain
  model_dir = os.path.join(qa_dir, "model")
  with open(os.path.join(model_dir, "metrics.jsonl")) as f:
    assert [json.loads(line)["step"] for line in f] == list(range(1, 31))
  with open(os.path.join(model_dir, "best", "model.json")) as f:
    assert json.load(f)["step"] == 30
  assert os.path.exists(os.path.join(model_dir, "best", "model.json"))
  with open(os.path.join(qa_dir, "metrics.json")) as f:
    metrics = json.load(f)
  # 16 blocks: recall@20 and recall@100 are dropped (`retrieval_recall.usable_ks`).
  assert set(metrics) == {"exact_match", "recall@1", "recall@5", "num_questions"}
  records = read_predictions(os.path.join(qa_dir, "predictions.jsonl"))
  assert len(records) == metrics["num_questions"] == 12
  assert np.mean([r["exact_match"] for r in records]) == pytest.approx(metrics["exact_match"])
  for record in records:
    assert {"question", "answer", "score", "gold_answers", "top_blocks"} <= set(record)
    assert len(record["top_blocks"]) == 5
    assert {"block_id", "title", "text", "probability"} <= set(record["top_blocks"][0])
  # The hub module's answer (printed after the export's paths) is the `ask` answer.
  hub_answer = stdout.split(os.path.join(qa_dir, "hub", "realm_qa") + "\n", 1)[1].split("\n")[0]
  assert model.system().answer(QUESTIONS[:1])[0].answer == hub_answer
  # `ask --corpus` read the swapped corpus (Appendix C): its evidence has the new block ids
  # (2000, 2001, ...) and, where Ada's block is among it, the updated fact.
  swapped = stdout[stdout.rindex("Q: ada lives in the city of"):]
  answer = re.search(r"^A: (.*)$", swapped, re.M).group(1)
  evidence = re.findall(r"^ [ *]\[[0-9.]+\] #(\d+) (.*)$", swapped, re.M)
  assert len(evidence) == 5 and all(2000 <= int(block_id) < 3000 for block_id, _ in evidence)
  assert "Ada lives in Doha." not in swapped
  assert all("Ada lives in Lima." in text for _, text in evidence if text.startswith("Ada "))
  assert answer


@pytest.mark.slow
def test_exports_reload_in_a_fresh_process_with_the_keras_outputs(chain, model, tmp_path):
  qa_dir, _ = chain
  inputs_path, out_path = str(tmp_path / "inputs.json"), str(tmp_path / "out.npz")
  with open(inputs_path, "w") as f:
    json.dump({"questions": QUESTIONS, "titles": TITLES, "texts": TEXTS, "masked": MASKED}, f)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  result = subprocess.run([sys.executable, "-c", FRESH_PROCESS, os.path.join(qa_dir, "hub"),
                           out_path, inputs_path], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-5000:]
  out = dict(np.load(out_path))
  config, retriever, reader = model.config, model.retriever, model.reader
  system = model.system(k=5)
  featurizer = system.featurizer

  # Query embedder: strings, ids, KerasLayer.
  features, query_ids = featurizer.questions(tf.constant(QUESTIONS))
  for name in ("input_word_ids", "input_mask", "input_type_ids"):
    np.testing.assert_array_equal(out["query_" + name], features[name].numpy())
  expected = retriever.embed_query(features).numpy()
  for key in ("query_serving", "query_ids", "query_keras_layer", "query_call_ids"):
    np.testing.assert_allclose(out[key], expected, atol=1e-5, err_msg=key)
  np.testing.assert_array_equal(out["preprocessor_input_word_ids"],
                                features["input_word_ids"].numpy())
  assert out["query_trainable_weights"] == len(retriever.query_encoder.trainable_variables +
                                               retriever.query_projection.trainable_variables)

  # Doc embedder: the frozen doc tower, i.e. the index's embeddings of the corpus, in the
  # index's precision (realm-finetune --embedding_dtype, auto: bfloat16 on some CPUs).
  blocks = BlockFeaturizer(model.tokenizer, seq_length=config.block_length)(
      (tf.constant(TITLES), tf.constant(TEXTS)))
  expected = retriever.embed_documents(blocks).numpy()
  atol = (1e-5 if model.doc_index.embedding_dtype == "float32" else embedding_tolerance(
      (model.doc_index.embedding_dtype,), float(np.max(np.abs(expected)))))
  np.testing.assert_allclose(out["doc_texts"], expected, rtol=0, atol=atol)
  np.testing.assert_allclose(out["doc_keras_layer"], expected, rtol=0, atol=atol)
  row = list(model.corpus.texts).index(TEXTS[0])
  np.testing.assert_allclose(expected[0], model.doc_index.embeddings[row], rtol=0, atol=atol)

  # Reader: span signature over the packed inputs, and MLM at the [MASK] positions.
  packed = featurizer.reader_inputs(query_ids, tf.constant(TITLES)[:, None],
                                    tf.constant(TEXTS)[:, None])
  for name in ("input_word_ids", "input_mask", "input_type_ids", "block_mask"):
    np.testing.assert_array_equal(out["read_" + name], packed[name].numpy())
  logits, starts, ends = reader.span_logits(
      {n: packed[n] for n in ("input_word_ids", "input_mask", "input_type_ids")},
      packed["block_mask"])
  np.testing.assert_allclose(out["read_span_logits"], logits.numpy(), atol=1e-4)
  np.testing.assert_allclose(out["span_keras_layer"], logits.numpy(), atol=1e-4)
  np.testing.assert_array_equal(out["read_span_starts"], starts.numpy())
  positions, weights = out["mlm_masked_lm_positions"], out["mlm_masked_lm_weights"]
  assert weights.tolist() == [[1, 0], [1, 1], [0, 0]]
  mask_id = model.tokenizer.mask_id
  assert all(out["mlm_input_word_ids"][i, p] == mask_id
             for i in range(3) for p, w in zip(positions[i], weights[i]) if w)
  masked_ids = [model.tokenizer.id_to_token(int(i)) for i in out["mlm_input_word_ids"][1]
                if i > 0]
  assert masked_ids[:7] == ["[CLS]", "the", "[MASK]", "is", "[MASK]", ".", "[SEP]"]
  mlm_features = {n: out["mlm_" + n] for n in ("input_word_ids", "input_mask",
                                               "input_type_ids")}
  np.testing.assert_allclose(out["mlm_mlm_logits"],
                             reader.mlm_logits(mlm_features, positions).numpy(), atol=1e-4)

  # realm_qa: the Python retrieve-and-read answers, scores and evidence.
  answers = system.answer(QUESTIONS)
  assert [a.decode() for a in out["qa_answer"]] == [a.answer for a in answers]
  assert [a.decode() for a in out["qa_ids_answer"]] == [a.answer for a in answers]
  assert [a.decode() for a in out["qa_keras_layer_answer"]] == [a.answer for a in answers]
  np.testing.assert_allclose(out["qa_score"], [a.probability for a in answers], atol=1e-5)
  assert out["qa_answer_block"].tolist() == [a.block for a in answers]
  assert out["qa_evidence_block_ids"].tolist() == [[e.block_id for e in a.evidence]
                                                   for a in answers]
  assert [[t.decode() for t in row] for row in out["qa_evidence_texts"]] == [
      [e.text for e in a.evidence] for a in answers]
  np.testing.assert_allclose(out["qa_evidence_probabilities"],
                             [[e.probability for e in a.evidence] for a in answers], atol=1e-5)
  assert "empty question" in str(out["empty_question_error"])
