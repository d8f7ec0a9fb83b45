"""A corpus of blocks longer than the model reads is refused on every path, never cut: the
corpus's longest block (recorded in its manifest, measured for older ones) against the
model's `block_length` (the tiny world's: 32 wordpieces)."""
import json
import os
import subprocess
import sys

import pytest

import untrained_model
from pipelines import build_index_lib
from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

LONG_BODY = " ".join(["ada lives in the city of paris"] * 8)  # 56 wordpieces, the title 1
REFUSED = r"blocks of up to 60 wordpieces, but the model .* reads blocks of 32 .*--block_length=32"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
  return untrained_model.shared(tmp_path_factory)


@pytest.fixture
def long_corpus(shared, tmp_path):
  """The world's corpus with one block of 60 wordpieces added, as JSONL."""
  path = tmp_path / "long.jsonl"
  with open(shared[0].corpus, encoding="utf-8") as f:
    lines = f.read().splitlines()
  lines.append(json.dumps({"id": 999, "title": "ada", "text": LONG_BODY}))
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


def test_the_longest_block_is_recorded_and_measured_for_older_manifests(shared, long_corpus):
  tokenizer = WordpieceTokenizer.from_vocab_file(shared[0].vocab_file)
  store = Corpus.load(long_corpus)
  assert store.block_length(tokenizer) == 60
  manifest = corpus_files.read_manifest(store.directory)
  assert list(manifest["block_lengths"].values()) == [60]
  del manifest["block_lengths"]  # a corpus written before the length was recorded
  corpus_files._write_json(store.directory, manifest)  # pylint: disable=protected-access
  assert Corpus.load(long_corpus).block_length(tokenizer) == 60
  assert Corpus.load(shared[0].corpus).block_length(tokenizer) <= 32


def test_ask_serve_and_evaluate_refuse_a_corpus_of_longer_blocks(shared, long_corpus):
  with pytest.raises(errors.InputError, match=REFUSED):
    QAModel.load(find_model_dir(shared[1]), corpus=long_corpus)  # ask, serve, evaluate load it
  result = subprocess.run([sys.executable, "-m", "realm_tf.ask", f"--model_dir={shared[1]}",
                           f"--corpus={long_corpus}", "who?"], capture_output=True, text=True,
                          timeout=600)
  last = result.stderr.strip().splitlines()[-1]  # one line (TensorFlow's own may precede it)
  assert result.returncode == 2 and last.startswith("realm-ask: ") and "--block_length=32" in last


def test_the_index_builder_refuses_them_before_embedding(shared, long_corpus, tmp_path):
  model_dir = find_model_dir(shared[1])
  with open(os.path.join(model_dir, "model.json"), encoding="utf-8") as f:
    embedder = os.path.join(model_dir, json.load(f)["doc_embedder"])
  with pytest.raises(errors.InputError, match=REFUSED):
    build_index_lib.build_index(Corpus.load(long_corpus).directory, embedder,
                                str(tmp_path / "index"),
                                kind="brute_force")
  assert not os.path.exists(tmp_path / "index" / "LATEST")


def test_fine_tuning_refuses_them_before_training(shared, long_corpus, tmp_path):
  world = shared[0]
  experiment = ExperimentConfig(
      task=OpenQATaskConfig(corpus=long_corpus, train_data=world.train,
                            vocab_file=world.vocab_file, model=tiny_world.model_config(),
                            init=tiny_world.INIT, retriever_top_k=16, index_kind="brute_force"),
      trainer=TrainerConfig(model_dir=str(tmp_path / "model"), num_steps=1, batch_size=4),
      runtime=RuntimeConfig(compute_dtype="float32"))
  with pytest.raises(errors.InputError, match=REFUSED):
    FineTuner(experiment, log=lambda message: None)
