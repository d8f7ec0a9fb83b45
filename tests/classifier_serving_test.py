"""A classification run (tiny world, a few steps) loaded, exported and served: the loaded model
predicts what the run's evaluation wrote, `realm-export-hub` writes its TF Hub modules, which
reload in a fresh process without realm_tf and give the loaded model's outputs, and
`realm-serve`'s API classifies with the evidence, names the model's kind and refuses bad input
and the other kind's endpoint with one-line JSON errors."""
import json
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest
import tensorflow as tf

import hub_fresh_process
import serve_helpers
from classification_test import write_claims
from realm_tf import tiny_world
from realm_tf.classification.model import ClassificationModel
from realm_tf.classification.model import classification_run_dir
from realm_tf.classification.trainer import PREDICTIONS_FILE
from realm_tf.experiments import registry
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.qa.open_qa_step import NULL_ROW
from realm_tf.serving import app as app_lib
from realm_tf.serving.batcher import Batcher
from realm_tf.serving.server import BackgroundServer
from realm_tf.serving.service import ClassifyService
from realm_tf.serving.validation import Limits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["ada lives in doha .", "bob lives in lima .", "kim works as a pilot ."]
ATOL = 1e-5  # float32 throughout (the block index too), as qa_end_to_end_test's float32 case

# Runs in a fresh interpreter that cannot import realm_tf at all.
FRESH_PROCESS = hub_fresh_process.script("""
    hub_dir, out_path = sys.argv[1:3]
    texts = tf.constant(json.loads(sys.argv[3]))
    classifier = hub.load(hub_dir + "/realm_classifier")
    out = {k: v for k, v in classifier.signatures["serving_default"](texts=texts).items()}
    out["keras_layer_label"] = hub.KerasLayer(classifier)(texts)["label"]
    out["label_names"] = classifier.label_names
    out["query_embeddings"] = hub.load(hub_dir + "/query_embedder")(texts)
    out["preprocessor_ids"] = hub.load(hub_dir + "/preprocessor")(texts)["input_word_ids"]
    try:
      classifier(tf.constant(["  "]))
      out["empty_text_error"] = ""
    except tf.errors.InvalidArgumentError as e:
      out["empty_text_error"] = e.message
""")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  """A dense-retrieval classifier trained for 3 steps by `realm-train`'s entry point."""
  directory = tmp_path_factory.mktemp("classifier")
  files = tiny_world.write_open_qa(str(directory / "world"))
  train = write_claims(str(directory / "train.jsonl"), tiny_world.PEOPLE[:4])
  dev = write_claims(str(directory / "dev.jsonl"), tiny_world.PEOPLE[12:])
  model_dir = str(directory / "model")
  run_experiment(registry.build("classification", params_override=",".join([
      f"trainer.model_dir={model_dir}", "trainer.num_steps=3", "trainer.batch_size=4",
      "trainer.checkpoint_every=3", f"task.corpus={files.corpus}", f"task.train_data={train}",
      f"task.dev_data={dev}", f"task.vocab_file={files.vocab_file}", "task.model.encoder=tiny",
      "task.model.query_length=16", "task.model.block_length=32",
      "task.model.reader_length=48", "task.model.projection_size=16", "task.reader_top_k=3",
      "runtime.compute_dtype=float32"])), verbose=False)
  return ClassificationModel.load(model_dir)


def by_block(evidence):
  return {e.block_id: e for e in evidence}


def test_the_loaded_model_predicts_what_the_runs_evaluation_wrote(model):
  with open(os.path.join(model.directory, PREDICTIONS_FILE), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  results = model.classify([r["text"] for r in records])
  for record, result in zip(records, results):
    assert result.label == record["predicted"]
    for name, p in record["p_labels"].items():
      assert result.label_probabilities[name] == pytest.approx(p, abs=ATOL)
    assert len(result.evidence) == 4  # k = 3 and the null document
    read = by_block(result.evidence)
    for written in record["evidence"]:  # the 3 the run kept
      block = read[written["row"] if written["row"] == NULL_ROW else
                   int(model.corpus.block_ids[written["row"]])]
      assert written["title"] == block.title
      assert block.probability == pytest.approx(written["p_z"], abs=ATOL)
      assert block.label_probability == pytest.approx(written["p_label_given_z"], abs=ATOL)


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
  """`realm-export-hub` on the run's directory, then the fresh process's outputs."""
  hub_dir = str(tmp_path_factory.mktemp("hub") / "hub")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  export = subprocess.run([sys.executable, "-m", "realm_tf.export_hub",
                           f"--model_dir={model.directory}", f"--export_dir={hub_dir}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
  assert export.returncode == 0, export.stderr[-5000:]
  out_path = os.path.join(os.path.dirname(hub_dir), "out.npz")
  result = subprocess.run([sys.executable, "-c", FRESH_PROCESS, hub_dir, out_path,
                           json.dumps(TEXTS)], cwd=os.path.dirname(hub_dir), env=env,
                          capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-5000:]
  return hub_dir, dict(np.load(out_path))


def test_the_binaries_find_the_run_from_its_directory_or_its_best(model):
  """`realm-export-hub` and `realm-serve` take the run's directory or its `best/`, as they take
  a QA model's; another directory is not a classification run."""
  assert classification_run_dir(model.directory) == model.directory
  assert classification_run_dir(os.path.join(model.directory, "best") + "/") == model.directory
  assert classification_run_dir(os.path.join(model.directory, "checkpoints")) == ""
  assert classification_run_dir(os.path.dirname(model.directory)) == ""


def test_export_reloads_in_a_fresh_process_with_the_loaded_models_outputs(model, exported):
  hub_dir, out = exported
  with open(os.path.join(hub_dir, "export.json"), encoding="utf-8") as f:
    manifest = json.load(f)
  assert sorted(os.listdir(hub_dir)) == ["export.json", "preprocessor", "query_embedder",
                                         "realm_classifier"]
  assert manifest["labels"] == list(model.labels) and manifest["k"] == 3
  assert [n.decode() for n in out["label_names"]] == list(model.labels)
  results = model.classify(TEXTS)
  assert [x.decode() for x in out["label"]] == [r.label for r in results]
  assert [x.decode() for x in out["keras_layer_label"]] == [r.label for r in results]
  np.testing.assert_allclose(out["probability"], [r.probability for r in results], atol=ATOL)
  np.testing.assert_allclose(out["label_probabilities"], [
      [r.label_probabilities[n] for n in model.labels] for r in results], atol=ATOL)
  assert out["evidence_block_ids"].shape == (3, 4)
  for b, result in enumerate(results):
    expected = by_block(result.evidence)
    assert sorted(out["evidence_block_ids"][b].tolist()) == sorted(expected)
    for j, block_id in enumerate(out["evidence_block_ids"][b].tolist()):
      block = expected[block_id]
      assert out["evidence_titles"][b, j].decode() == block.title
      assert out["evidence_texts"][b, j].decode() == block.text
      assert out["evidence_probabilities"][b, j] == pytest.approx(block.probability, abs=ATOL)
      assert out["evidence_label_probabilities"][b, j] == pytest.approx(
          block.label_probability, abs=ATOL)
    share = out["evidence_probabilities"][b] * out["evidence_label_probabilities"][b]
    assert np.all(np.diff(share) <= 0)  # ranked as predictions.jsonl ranks
  features = model.featurizer.queries(tf.constant(TEXTS))
  np.testing.assert_allclose(out["query_embeddings"],
                             model.retriever.embed_query(features).numpy(), atol=ATOL)
  np.testing.assert_array_equal(out["preprocessor_ids"], features["input_word_ids"].numpy())
  assert "realm_classifier: empty text in" in str(out["empty_text_error"])


@pytest.fixture(scope="module")
def client(model):
  app, _ = serve_helpers.make_app(ClassifyService(model), max_question_chars=100, max_texts=4)
  with BackgroundServer(app) as running, httpx.Client(base_url=running.url,
                                                      timeout=600) as http:
    yield http


def test_classify_answers_with_the_evidence_and_info_names_the_kind(client, model):
  reply = client.post("/v1/classify", json={"texts": TEXTS[:2], "top_k": 2})
  assert reply.status_code == 200, reply.text
  body = reply.json()
  assert body["top_k"] == 2 and len(body["classifications"]) == 2
  for got, result in zip(body["classifications"], model.classify(TEXTS[:2], 2)):
    assert (got["text"], got["label"]) == (result.text, result.label)
    assert got["probability"] == pytest.approx(result.probability, abs=ATOL)
    assert len(got["evidence"]) == 3  # 2 blocks and the null document
    read = by_block(result.evidence)
    for block in got["evidence"]:
      expected = read[block["block_id"]]
      assert (block["title"], block["text"]) == (expected.title, expected.text)
      assert block["probability"] == pytest.approx(expected.probability, abs=ATOL)
      assert block["label_probability"] == pytest.approx(expected.label_probability, abs=ATOL)
  single = client.post("/v1/classify", json={"text": TEXTS[2]}).json()["classifications"]
  assert len(single) == 1 and len(single[0]["evidence"]) == 4 and single[0]["label"] in (
      model.labels)
  info = client.get("/v1/info").json()
  assert info["kind"] == "classification" and info["labels"] == list(model.labels)
  assert info["default_top_k"] == 3 and info["corpus"]["num_blocks"] == len(model.corpus)


class _QAStub:
  """What the app reads of a QA service before its model answers anything."""
  kind = "qa"

  def info(self):
    return {"kind": self.kind}


@pytest.mark.parametrize("path,kind,served", [("/v1/ask", "a classification", "/v1/classify"),
                                              ("/", "a classification", "/v1/classify"),
                                              ("/v1/classify", "a QA", "/v1/ask")])
def test_the_other_kinds_endpoint_names_the_model_kind(client, path, kind, served):
  if served == "/v1/ask":
    app = app_lib.create_app(_QAStub(), Batcher(lambda texts, k: texts), Limits())
    with BackgroundServer(app) as running:
      response = httpx.post(running.url + path, json={"text": "a"})
  else:
    response = (client.get(path) if path == "/" else
                client.post(path, json={"question": "who?"}))
  assert response.status_code == 404
  message = response.json()["error"]
  assert message == (f"{path}: this server serves {kind} model, which answers POST {served}. "
                     f"Send the request to {served}.")


@pytest.mark.parametrize("body,message", [
    ({"text": ""}, '"text" is empty'),
    ({"texts": ["ada lives in doha .", " \t"]}, '"texts"[1] is empty'),
    ({"text": "a" * 101}, '"text" has 101 characters, over the limit of 100'),
    ({"text": "ada", "top_k": 0}, '"top_k" is 0, outside 1..16'),
    ({"text": "ada", "top_k": 17}, '"top_k" is 17, outside 1..16'),
    ({"texts": []}, '"texts" must be a list of 1 to 4 strings, got 0 texts'),
    ({"texts": ["a"] * 5}, "got 5 texts"),
    ({"texts": "ada"}, "got a str"),
    ({"text": "a", "texts": ["b"]}, 'needs one of "text" and "texts"'),
    ({"question": "who?"}, "unknown field(s) 'question'"),
    ({"texts": ["ada", "doha \ud800"]},
     '"texts"[1] holds the lone surrogate U+D800 at character 5'),
])
def test_bad_input_gets_a_one_line_400(client, body, message):
  response = client.post("/v1/classify", content=json.dumps(body))  # ASCII: "\ud800" escaped
  assert response.status_code == 400, response.text
  error = response.json()["error"]
  assert error.startswith("/v1/classify: ") and message in error and "\n" not in error
