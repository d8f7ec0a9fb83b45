"""Imports of released ORQA directories follow every setting, and their checks say what they did.

A small bundle in the released layout (`released_bundle`: 40 blocks, towers of two 32-d
attention heads, `block_emb` made by the embedder's own doc tower), without the reference
REALM: one import per release and inputs, one index per index kind / ScaNN settings / shard
size / storage dtype, each built once and reused; `--verify_blocks` and the attention heads.
"""
import os
import shutil
import subprocess
import sys

from absl import logging as absl_logging
import numpy as np
import pytest

import released_bundle
from realm_tf import configs
from realm_tf import errors
from realm_tf.checkpoints import released_embeddings
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.presets import ModelConfig
from realm_tf.qa import released_imports
from realm_tf.qa import released_model
from realm_tf.qa.ask_lib import Asker
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.model import ModelInfo
from realm_tf.qa.released_imports import ReleasedSettings
from realm_tf.retrieval import embedding
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = "ada bob pam kim lea tom eva max ida ron".split()
CITIES = "doha kyiv lima oslo".split()
JOBS = "tailor nurse pilot baker".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + sorted(
    set(NAMES + CITIES + JOBS + "lives in is a where does live".split()))
TITLES = [n.title() for n in NAMES for _ in CITIES]
TEXTS = [f"{n} lives in {c}. {n} is a {JOBS[(i + j) % 4]}."
         for i, n in enumerate(NAMES) for j, c in enumerate(CITIES)]
CONFIG = ModelConfig(encoder=configs.EncoderConfig(
    vocab_size=len(VOCAB), hidden_size=64, num_layers=1, num_attention_heads=2,
    intermediate_size=64), projection_size=16, span_hidden_size=16)
HEADS = ReleasedSettings(num_attention_heads=2)
MODEL = "orqa_nq_model_from_realm"
SWAPPED = (1, 2)  # rows the default sample of 8 (0, 5, 11, ..., 39) misses


def _perturbed(seed):
  return released_bundle.random_models(CONFIG, seed)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
  """The bundle's root: the released model, embedder (+ `block_emb`) and blocks."""
  root = str(tmp_path_factory.mktemp("released"))
  pretrained, _ = _perturbed(1)
  paths = released_bundle.write_embedder(root, pretrained, VOCAB)
  tokenizer = WordpieceTokenizer.from_vocab_file(paths["vocab"])
  tower = embedding.DocTower(pretrained, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  released_bundle.write_block_emb(paths["encoded"],
                                  embedding.embed_texts(tower, tokenizer, TITLES, TEXTS))
  released_bundle.write_block_records(os.path.join(root, "enwiki-20181220"), TITLES, TEXTS)
  released_bundle.write_orqa_model(root, MODEL, *_perturbed(2), step=7)
  return root


@pytest.fixture
def logs(caplog):
  """`caplog` with absl's INFO lines (through absl's verbosity: TensorFlow's SavedModel export
  resets the logger to it)."""
  verbosity = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.INFO)
  yield caplog
  absl_logging.set_verbosity(verbosity)


def _copy(bundle, tmp_path) -> str:
  """A copy of the bundle (imports are written beside it); returns its model directory."""
  root = str(tmp_path / "bundle")
  shutil.copytree(bundle, root)
  return os.path.join(root, MODEL)


def _mtime(path):
  return os.stat(path).st_mtime_ns


def test_each_setting_has_its_own_index_built_once_and_the_import_is_shared(
    bundle, tmp_path, logs):
  model_dir = _copy(bundle, tmp_path)
  exact = released_imports.imported_model(model_dir, "brute_force", settings=HEADS)
  assert exact.built == ("import", "index") and exact.directory == model_dir + ".realm_tf"
  assert exact.doc_index.endswith(os.path.join("index", "brute_force-shard_auto-float32"))
  assert "index/brute_force-shard_auto-float32 (built now)" in logs.text
  weights = os.path.join(exact.directory, "ckpt-1.index")
  stamps = {"import": _mtime(weights)}

  scann = released_imports.imported_model(model_dir, "scann", settings=HEADS)
  assert scann.built == ("index",) and scann.doc_index != exact.doc_index
  assert DocIndex.read_info(scann.doc_index)["kind"] == "scann"
  stamps.update({exact.doc_index: _mtime(os.path.join(exact.doc_index, "manifest.json")),
                 scann.doc_index: _mtime(os.path.join(scann.doc_index, "manifest.json"))})

  logs.clear()  # realm-evaluate (exact) and realm-ask (ScaNN) in turn: nothing rebuilt
  again = released_imports.imported_model(model_dir, "brute_force", settings=HEADS)
  assert again.built == () and again.doc_index == exact.doc_index
  assert released_imports.imported_model(model_dir, "scann", settings=HEADS).built == ()
  assert "(reused), index index/scann-leaves_auto-search_auto-dims_2-reorder_100-shard_auto-" \
         "float32 (reused)" in logs.text
  assert "verified on 8 of 40 rows" in logs.text

  leaves = released_imports.imported_model(model_dir, "scann", ScannSettings(num_leaves=4),
                                           settings=HEADS)
  assert leaves.built == ("index",) and "leaves_4" in leaves.doc_index
  manifest = DocIndex.read_info(leaves.doc_index)
  assert manifest["kind"] == "scann" and manifest["num_blocks"] == len(TEXTS)
  assert released_imports.imported_model(model_dir, "scann", ScannSettings(num_leaves=4),
                                         settings=HEADS).built == ()
  with pytest.raises(errors.InputError, match="ScannSettings.num_leaves: 50 leaves for 40 "):
    released_imports.imported_model(model_dir, "scann", ScannSettings(num_leaves=50),
                                    settings=HEADS)
  shards = released_imports.imported_model(model_dir, "brute_force",
                                           sharding=Sharding(shard_size=20), settings=HEADS)
  assert shards.built == ("index",) and "shard_20" in shards.doc_index
  half = released_imports.imported_model(
      model_dir, "brute_force", settings=ReleasedSettings(2, 2, "float16"))
  assert half.built == ("index",) and half.doc_index.endswith("shard_auto-float16")
  assert DocIndex.read_info(half.doc_index)["embedding_storage_dtype"] == "float16"

  assert _mtime(weights) == stamps["import"]  # one import, its indexes side by side
  for index, mtime in stamps.items():
    if index != "import":
      assert _mtime(os.path.join(index, "manifest.json")) == mtime
  shared = os.path.join(exact.directory, "embeddings", "float32", "block_embeddings.npy")
  assert os.stat(os.path.join(scann.doc_index, "block_embeddings.npy")).st_ino == \
      os.stat(shared).st_ino  # one embeddings file, hard-linked into each index
  asker = Asker(model_dir, k=2, index_kind="scann", scann=ScannSettings(num_leaves=4),
                released=HEADS)
  assert asker.model.doc_index.kind == "scann" and asker.model.directory == exact.directory
  assert asker.ask("where does ada live").evidence


def test_the_attention_heads_come_from_the_flag_a_bert_config_or_are_inferred_and_logged(
    bundle, tmp_path, logs):
  model_dir = _copy(bundle, tmp_path)
  embedder = os.path.join(os.path.dirname(model_dir), "cc_news_pretrained", "embedder")
  heads = released_model.attention_heads(model_dir, embedder)
  assert heads == (1, "inferred: hidden size 64 / 64") and heads.inferred
  assert "1 attention heads, inferred (hidden size 64 / 64" in logs.text
  # One 64-d head loads the towers of two 32-d heads, and block_emb's check refuses it.
  with pytest.raises(errors.EmbeddingMismatchError,
                     match=r"rows .*pass --released_num_attention_heads\.$"):
    released_imports.imported_model(model_dir, "brute_force")
  assert not os.path.exists(model_dir + ".realm_tf")
  with pytest.raises(errors.InputError, match=r"64, which 3 attention heads do not divide\. "
                                              r"Pass --released_num_attention_heads"):
    released_imports.imported_model(model_dir, "brute_force",
                                     settings=ReleasedSettings(num_attention_heads=3))

  config = os.path.join(model_dir, released_model.CONFIG_FILE)
  with open(config, "w") as f:
    f.write('{"hidden_size": 64, "num_attention_heads": "two"}')
  with pytest.raises(errors.InputError, match=r"bert_config.json: num_attention_heads is 'two'"):
    released_model.attention_heads(model_dir, embedder)
  with open(config, "w") as f:
    f.write('{"hidden_size": 64, "num_attention_heads": 2}')
  logs.clear()
  imported = released_imports.imported_model(model_dir, "brute_force")
  assert imported.built == ("import", "index") and "inferred" not in logs.text
  assert f"2 attention heads ({config})" in logs.text
  assert ModelInfo.read(imported.directory).model.encoder.num_attention_heads == 2
  # The flag, where it agrees with the config, is the same import.
  assert released_imports.imported_model(model_dir, "brute_force", settings=HEADS).built == ()


def test_verify_blocks_all_finds_two_swapped_rows_that_the_default_sample_passes(
    bundle, tmp_path, logs):
  model_dir = _copy(bundle, tmp_path)
  embedder = os.path.join(os.path.dirname(model_dir), "cc_news_pretrained", "embedder")
  encoded = released_model.block_emb_path(embedder)
  block_emb = np.array(released_embeddings.open_released_embeddings(encoded)[0])
  a, b = SWAPPED
  block_emb[[a, b]] = block_emb[[b, a]]
  for name in os.listdir(os.path.dirname(encoded)):
    os.remove(os.path.join(os.path.dirname(encoded), name))
  released_bundle.write_block_emb(encoded, block_emb)
  imported = released_imports.imported_model(model_dir, "brute_force", settings=HEADS)
  assert imported.verified_rows == 8 and imported.num_blocks == len(TEXTS)
  assert ("block_emb verified on 8 of 40 rows (--verify_blocks=all checks every row)"
          in logs.text)
  export = str(tmp_path / "export")  # the import's doc tower, for the last check
  shutil.copytree(os.path.join(imported.directory, "doc_embedder", released_model.VERSION),
                  export)

  result = subprocess.run(
      [sys.executable, "-m", "realm_tf.ask", f"--model_dir={model_dir}", "--verify_blocks=all",
       "--released_num_attention_heads=2", "--index_kind=brute_force", "where does ada live"],
      capture_output=True, text=True, cwd=ROOT, timeout=600,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert result.returncode == 2, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("realm-ask: embeddings in ") and "Traceback" not in result.stderr
  assert "encoded.ckpt.data-00000-of-00001 were not made by the doc tower of the embedder" in last
  assert "2 of the 40 rows re-embedded differ (rows 1, 2," in last
  assert "Pass block_emb and the blocks of one release" in last
  assert not os.path.exists(imported.directory)  # never used again

  # A row count that does not fit says what to do, too.
  released_bundle.write_block_records(str(tmp_path / "short"), TITLES[:-1], TEXTS[:-1])
  with pytest.raises(errors.EmbeddingMismatchError,
                     match=r"40 embeddings for the 39 blocks .*\. Pass block_emb and the blocks "
                           r"of one release"):
    released_model.verify_block_emb(DocEmbedder(export),
                                    Corpus.load(str(tmp_path / "short" / "blocks.tfr")),
                                    encoded, embedder)


def test_released_settings_are_checked():
  assert ReleasedSettings(verify_blocks="all").verify_blocks == "all"
  assert ReleasedSettings(verify_blocks="12").verify_blocks == 12
  for bad in (0, "some", -1):
    with pytest.raises(errors.InputError, match="--verify_blocks"):
      ReleasedSettings(verify_blocks=bad)
  with pytest.raises(errors.InputError, match="--released_num_attention_heads"):
    ReleasedSettings(num_attention_heads=-1)
