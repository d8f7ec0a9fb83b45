"""Google's released ORQA models fine-tuned from REALM: reading a release, converting it.

A release (`orqa_{nq,wq}_model_from_realm`, an ORQA Estimator model_dir) holds in
`export/best_default/checkpoint/model.ckpt-<step>` the fine-tuned query tower and reader
(TF1 names, with Adam slots) but not its document index: ORQA keeps `block_emb` and the
blocks as local variables. So the doc tower is the pre-trained embedder that wrote `block_emb`
(`cc_news_pretrained/embedder`, frozen through fine-tuning) over `enwiki-20181220/blocks.tfr`,
found where `params.json` names them (`gs://<bucket>/<path>` as `<path>` beside the release).
Lengths are ORQA's: questions of 64 wordpieces, blocks of 288, reader inputs 320, spans 10.

A TF1 checkpoint does not hold the attention head count (an [H, H] kernel loads into any count
dividing H): `--released_num_attention_heads`, else a release's `bert_config.json`, else H / 64,
logged as inferred; a wrong count loads, and the `block_emb` check refuses it. `import_released`
writes the QA model directory `QAModel.load` reads; `qa.released_imports` keeps the imports.
"""
import json
import os
import re
import shutil
import uuid
from typing import Dict, NamedTuple, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import errors
from realm_tf.checkpoints import released_embeddings
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models
from realm_tf.qa import embedding_check
from realm_tf.qa import model as model_lib
from realm_tf.qa import released_indexes
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config

CHECKPOINT_DIR = os.path.join("export", "best_default", "checkpoint")
PARAMS = "params.json"
DEFAULTS = {"retriever_module_path": "cc_news_pretrained/embedder",
            "block_records_path": "enwiki-20181220/blocks.tfr"}
_READER = "reader/module/bert/"
VERSION = "step-00000000"
CONFIG_FILE = "bert_config.json"
# Where a release's `bert_config.json` is looked for: the model directory, beside its
# checkpoint, the embedder and its assets.
CONFIG_PLACES = ("{model}", "{model}/" + CHECKPOINT_DIR, "{embedder}", "{embedder}/assets")
HEAD_SIZE = 64


def released_checkpoint(directory: str) -> Optional[str]:
  """The prefix of the latest `model.ckpt-<step>` of a released model directory, or None."""
  folder = os.path.join(directory, CHECKPOINT_DIR)
  if not tf.io.gfile.isdir(folder):
    return None
  steps = [int(m.group(1)) for m in (re.fullmatch(r"model\.ckpt-(\d+)\.index", n)
                                      for n in tf.io.gfile.listdir(folder)) if m]
  return os.path.join(folder, f"model.ckpt-{max(steps)}") if steps else None


def released_inputs(directory: str) -> Dict[str, str]:
  """{"retriever_module_path", "block_records_path"}: the local paths of what `params.json`
  names (or the release's names), beside the model directory.

  Raises:
    FileNotFoundError: naming the missing file and where it comes from.
  """
  params = {}
  path = os.path.join(directory, PARAMS)
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      params = json.load(f)
  root = os.path.dirname(os.path.abspath(directory.rstrip("/")))
  found = {}
  for key, default in DEFAULTS.items():
    value = str(params.get(key) or default)
    local = re.sub(r"^gs://[^/]+/", "", value)
    candidate = local if os.path.isabs(local) else os.path.join(root, local)
    if not tf.io.gfile.exists(candidate):
      raise FileNotFoundError(errors.describe(
          candidate, f"not found: the released model {directory} needs its {key} "
          f"({value})", f"Download it there (e.g. gsutil cp -r {value} {candidate})"))
    found[key] = candidate
  return found


def _shapes(path: str) -> Dict[str, list]:
  return dict(tf.train.list_variables(path))


def model_config(orqa_checkpoint: str, num_attention_heads: int = 0) -> ModelConfig:
  """The `ModelConfig` of a released ORQA checkpoint, read from its variables' shapes
  (attention heads: `HEAD_SIZE` dimensions each, unless given)."""
  shapes = _shapes(orqa_checkpoint)
  word = shapes.get(_READER + "embeddings/word_embeddings")
  if word is None:
    raise errors.InputError(errors.describe(
        orqa_checkpoint, "not a released ORQA checkpoint (no reader/module/bert/ variables)",
        "Pass orqa_{nq,wq}_model_from_realm/export/best_default/checkpoint/model.ckpt-N"))
  vocab_size, hidden = word
  heads = num_attention_heads or max(1, hidden // HEAD_SIZE)
  if hidden % heads:
    raise errors.InputError(errors.describe(
        orqa_checkpoint, f"a hidden size of {hidden}, which {heads} attention heads do not "
        "divide", "Pass --released_num_attention_heads=<the towers' heads> (a divisor of "
        f"{hidden})"))
  layers = len({m.group(1) for m in (re.match(_READER + r"encoder/layer_(\d+)/", n)
                                      for n in shapes) if m})
  encoder = configs.EncoderConfig(
      vocab_size=vocab_size, hidden_size=hidden, num_layers=layers,
      num_attention_heads=heads,
      intermediate_size=shapes[_READER + "encoder/layer_0/intermediate/dense/kernel"][1],
      max_position_embeddings=shapes[_READER + "embeddings/position_embeddings"][0],
      type_vocab_size=shapes[_READER + "embeddings/token_type_embeddings"][0])
  return ModelConfig(encoder=encoder,
                     projection_size=shapes["module/module/module/dense/kernel"][1],
                     span_hidden_size=shapes["reader/dense/kernel"][1] // 2)


class Heads(NamedTuple):
  """The attention heads of a release's towers: `count`, and `source` (the flag, a
  `bert_config.json`'s path, or "inferred: ...")."""
  count: int
  source: str

  @property
  def inferred(self) -> bool:
    return self.source.startswith("inferred")


def attention_heads(directory: str, embedder_dir: str, override: int = 0) -> Heads:
  """The attention heads of released `directory`'s towers (module docstring), logged.

  Raises:
    InputError: a `bert_config.json` without a positive `num_attention_heads`.
  """
  if override:
    logging.info("Released model %s: %d attention heads (--released_num_attention_heads)",
                 directory, override)
    return Heads(override, "--released_num_attention_heads")
  for place in CONFIG_PLACES:
    path = os.path.join(place.format(model=directory, embedder=embedder_dir), CONFIG_FILE)
    if tf.io.gfile.exists(path):
      try:
        with tf.io.gfile.GFile(path) as f:
          heads = dict(json.load(f)).get("num_attention_heads")
      except (ValueError, TypeError) as e:
        heads = f"unreadable ({errors.one_line(e)})"
      if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise errors.InputError(errors.describe(
            path, f"num_attention_heads is {heads!r}, not a positive integer",
            "Restore the release's bert_config.json, or pass --released_num_attention_heads"))
      logging.info("Released model %s: %d attention heads (%s)", directory, heads, path)
      return Heads(heads, path)
  hidden = _shapes(released_checkpoint(directory)).get(_READER + "embeddings/word_embeddings",
                                                       [0, 0])[1]
  heads = max(1, hidden // HEAD_SIZE)
  logging.warning("Released model %s: %d attention heads, inferred (hidden size %d / %d; no "
                  "%s in the release): pass --released_num_attention_heads if its heads are "
                  "not %d-dimensional", directory, heads, hidden, HEAD_SIZE, CONFIG_FILE,
                  HEAD_SIZE)
  return Heads(heads, f"inferred: hidden size {hidden} / {HEAD_SIZE}")


def _global_step(orqa_checkpoint: str) -> int:
  reader = tf.train.load_checkpoint(orqa_checkpoint)
  return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else 0


def block_emb_path(embedder_dir: str) -> str:
  """The released `block_emb` of an embedder module: `<embedder_dir>/encoded/encoded.ckpt`."""
  return os.path.join(embedder_dir, "encoded", "encoded.ckpt")


def verify_block_emb(doc_embedder: DocEmbedder, corpus: Corpus, embeddings: str,
                     embedder_dir: str, rows: embedding_check.Rows = embedding_check.DEFAULT_ROWS,
                     heads_inferred: bool = False) -> Tuple[np.ndarray, int]:
  """(the released embeddings at `embeddings`, memory-mapped; how many rows were re-embedded):
  checks that their rows pair with `corpus`'s blocks by `doc_embedder`, the export of the
  embedder at `embedder_dir` (`qa.embedding_check`, `rows` of them).

  Raises:
    EmbeddingMismatchError: naming the file, the rows that differ and what to do.
  """
  array, source = released_embeddings.open_released_embeddings(embeddings)
  remedy = ("Pass block_emb and the blocks of one release, with the embedder that made "
            "block_emb (cc_news_pretrained/embedder/encoded/encoded.ckpt, enwiki-20181220/"
            "blocks.tfr); download them again if one was damaged or cut short")
  if heads_inferred:
    remedy += ("; or, if the towers' attention heads are not "
               f"{HEAD_SIZE}-dimensional, pass --released_num_attention_heads")
  verified = embedding_check.verify_embeddings(
      doc_embedder, corpus, array, f"embeddings in {source}", ("float32", "float32"), rows,
      tower=f"the doc tower of the embedder {embedder_dir}", remedy=remedy)
  return array, verified


def import_released(orqa_checkpoint: str, embedder_dir: str, blocks: str, output_dir: str,
                    embeddings: str = "", index_kind: str = "scann",
                    scann: ScannSettings = ScannSettings(), sharding: Sharding = Sharding(),
                    storage_dtype: str = "float32",
                    num_attention_heads: int = 0,
                    verify_blocks: embedding_check.Rows = embedding_check.DEFAULT_ROWS) -> int:
  """Writes the QA model directory of a released ORQA model at `output_dir` (written aside,
  then renamed over it); returns how many rows of `block_emb` were verified.

  Args:
    orqa_checkpoint: the fine-tuned model's `model.ckpt-<step>` prefix.
    embedder_dir: the pre-trained embedder module (`variables/variables`, `assets/vocab.txt`,
      `encoded/encoded.ckpt`).
    blocks: the released `blocks.tfr` (`Corpus.load`).
    embeddings: the block embeddings (default `block_emb_path(embedder_dir)`), checked
      against the embedder's doc tower on `verify_blocks` rows (a number or "all").
    index_kind, scann, sharding, storage_dtype: the first index (`qa.released_indexes`) and
      the dtype the embeddings are stored in.
    num_attention_heads: 0: inferred (`HEAD_SIZE` dimensions per head).

  Raises:
    InputError / CheckpointMismatchError: files that do not fit together (a vocabulary of
      another size, an embedder of another shape, embeddings of another corpus or tower,
      ScaNN settings that do not fit the blocks), each naming what to do.
  """
  config = model_config(orqa_checkpoint, num_attention_heads)
  vocab = os.path.join(embedder_dir, "assets", "vocab.txt")
  tokenizer = WordpieceTokenizer.from_vocab_file(vocab)
  if tokenizer.vocab_size != config.encoder.vocab_size:
    raise errors.InputError(errors.describe(
        vocab, f"{tokenizer.vocab_size} wordpieces, but {orqa_checkpoint} has a vocabulary of "
        f"{config.encoder.vocab_size}", "Pass the embedder the model was fine-tuned from"))
  retriever, reader = build_models(config)
  checkpoints.load_orqa(retriever, reader, orqa_checkpoint, query_tower_only=True)
  checkpoints.load_realm_embedder(retriever, os.path.join(embedder_dir, "variables", "variables"),
                                  doc_tower_only=True)
  corpus = Corpus.load(blocks)
  if index_kind == "scann":  # settings that cannot fit fail before the work
    scann.check(len(corpus), config.projection_size, sharding)
  work = f"{output_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
  os.makedirs(work)
  try:
    shutil.copyfile(vocab, os.path.join(work, model_lib.VOCAB))
    corpus_files.copy_corpus(corpus.directory, os.path.join(work, model_lib.CORPUS))
    embedder_path = os.path.join(work, "doc_embedder", VERSION)
    export_doc_embedder(retriever, embedder_path, tokenizer.cls_id, tokenizer.sep_id,
                        tokenizer.pad_id, block_length=config.block_length, snapshot_step=0,
                        tokenizer=tokenizer)
    array, verified = verify_block_emb(
        DocEmbedder(embedder_path), corpus, embeddings or block_emb_path(embedder_dir),
        embedder_dir, verify_blocks, heads_inferred=not num_attention_heads)
    released_indexes.write_embeddings(work, array, storage_dtype)
    del array
    doc_index, _ = released_indexes.add_index(work, corpus.fingerprint, index_kind, scann,
                                              sharding, storage_dtype)
    model_lib.model_checkpoint(retriever, reader).write(os.path.join(work, "ckpt-1"))
    with tf.io.gfile.GFile(os.path.join(work, "checkpoint"), "w") as f:
      f.write('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    model_lib.ModelInfo(
        model=config, corpus=model_lib.CORPUS, corpus_fingerprint=corpus.fingerprint,
        doc_index=doc_index, doc_embedder=os.path.join("doc_embedder", VERSION),
        step=_global_step(orqa_checkpoint),
        vocab_fingerprint=run_config.vocab_fingerprint(tokenizer.vocabulary)).write(work)
    if os.path.isdir(output_dir):
      shutil.rmtree(output_dir)
    os.rename(work, output_dir)
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise
  logging.info("Imported the released model %s into %s", orqa_checkpoint, output_dir)
  return verified


def is_released_dir(directory: str) -> bool:
  """Whether `directory` is a released ORQA model directory (and not a realm_tf one)."""
  return (not tf.io.gfile.exists(os.path.join(directory, model_lib.MODEL_INFO))
          and released_checkpoint(directory) is not None)
