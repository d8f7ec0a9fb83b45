"""Google's released ORQA models fine-tuned from REALM, as realm_tf QA model directories.

A released model directory (`orqa_{nq,wq}_model_from_realm`, an ORQA Estimator model_dir)
keeps its weights in `export/best_default/checkpoint/model.ckpt-<step>`, a TF1 checkpoint of
the fine-tuned query tower (`module/module/module/module/bert/`, head
`module/module/module/{dense,LayerNorm}`) and reader (`reader/module/bert/`, span head
`reader/{dense,dense_1,layer_normalization}`), with `global_step` and Adam slots. Its document
index is not in it (ORQA holds `block_emb` and the blocks as local variables): the blocks are
`enwiki-20181220/blocks.tfr` and their embeddings `block_emb` of the pre-trained embedder's
`encoded/encoded.ckpt`, which embedded them with its own tower, frozen through fine-tuning.
So the doc tower is that embedder (`cc_news_pretrained/embedder/variables/variables`, its
vocabulary `assets/vocab.txt`), and the query tower and the reader are the fine-tuned ones
(`presets.ModelConfig` lengths: questions of up to 64 wordpieces, blocks of 288, reader
inputs of 320, spans of up to 10 wordpieces, as ORQA).

`import_released` writes the model directory `QAModel.load` reads (the corpus in the on-disk
form, the doc-embedder export, the index over `block_emb` checked against that doc tower, a
TF2 checkpoint of the towers and reader); `QAModel.load` of a released directory imports it
once, beside it (`<dir>.realm_tf/`) or in the cache, finding the embedder and the blocks where
its `params.json` names them (`gs://<bucket>/<path>` is looked for as `<path>` beside the model
directory, the layout of `gsutil cp -r gs://realm-data gs://orqa-data` into one directory).
"""
import json
import os
import re
import shutil
import uuid
from typing import Dict, Optional, Tuple

from absl import logging
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import errors
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models
from realm_tf.qa import model as model_lib
from realm_tf.qa.doc_index import EmbeddingMismatchError
from realm_tf.qa.doc_index import index_corpus
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
  (attention heads: 64 dimensions each, BERT's, unless given)."""
  shapes = _shapes(orqa_checkpoint)
  word = shapes.get(_READER + "embeddings/word_embeddings")
  if word is None:
    raise errors.InputError(errors.describe(
        orqa_checkpoint, "not a released ORQA checkpoint (no reader/module/bert/ variables)",
        "Pass orqa_{nq,wq}_model_from_realm/export/best_default/checkpoint/model.ckpt-N"))
  vocab_size, hidden = word
  layers = len({m.group(1) for m in (re.match(_READER + r"encoder/layer_(\d+)/", n)
                                      for n in shapes) if m})
  encoder = configs.EncoderConfig(
      vocab_size=vocab_size, hidden_size=hidden, num_layers=layers,
      num_attention_heads=num_attention_heads or hidden // 64,
      intermediate_size=shapes[_READER + "encoder/layer_0/intermediate/dense/kernel"][1],
      max_position_embeddings=shapes[_READER + "embeddings/position_embeddings"][0],
      type_vocab_size=shapes[_READER + "embeddings/token_type_embeddings"][0])
  return ModelConfig(encoder=encoder,
                     projection_size=shapes["module/module/module/dense/kernel"][1],
                     span_hidden_size=shapes["reader/dense/kernel"][1] // 2)


def _global_step(orqa_checkpoint: str) -> int:
  reader = tf.train.load_checkpoint(orqa_checkpoint)
  return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else 0


def import_released(orqa_checkpoint: str, embedder_dir: str, blocks: str, output_dir: str,
                    embeddings: str = "", index_kind: str = "scann",
                    scann: ScannSettings = ScannSettings(), storage_dtype: str = "float32",
                    num_attention_heads: int = 0) -> str:
  """Writes the QA model directory of a released ORQA model at `output_dir`; returns it.

  Args:
    orqa_checkpoint: the fine-tuned model's `model.ckpt-<step>` prefix.
    embedder_dir: the pre-trained embedder module (`variables/variables`, `assets/vocab.txt`,
      `encoded/encoded.ckpt`).
    blocks: the released `blocks.tfr` (`Corpus.load`).
    embeddings: the block embeddings (default `<embedder_dir>/encoded/encoded.ckpt`), checked
      against the embedder's doc tower (`qa.doc_index.index_corpus`).
    index_kind, scann, storage_dtype: the index over them and the embeddings file's dtype.
    num_attention_heads: 0 for 64 dimensions per head.

  Raises:
    InputError / CheckpointMismatchError: files that do not fit together (a vocabulary of
      another size, an embedder of another shape, embeddings of another corpus or tower).
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
  work = f"{output_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
  os.makedirs(work)
  try:
    shutil.copyfile(vocab, os.path.join(work, model_lib.VOCAB))
    corpus_files.copy_corpus(corpus.directory, os.path.join(work, model_lib.CORPUS))
    embedder_path = os.path.join(work, "doc_embedder", VERSION)
    export_doc_embedder(retriever, embedder_path, tokenizer.cls_id, tokenizer.sep_id,
                        tokenizer.pad_id, block_length=config.block_length, snapshot_step=0,
                        tokenizer=tokenizer)
    try:
      doc_index = index_corpus(
          DocEmbedder(embedder_path), corpus,
          embeddings or os.path.join(embedder_dir, "encoded", "encoded.ckpt"), kind=index_kind,
          scann=scann, storage_dtype=storage_dtype)
    except EmbeddingMismatchError as e:  # name the embedder given, not the export made of it
      raise EmbeddingMismatchError(f"{e} (the doc tower: the embedder {embedder_dir})") from e
    doc_index.save(os.path.join(work, "index", VERSION))
    model_lib.model_checkpoint(retriever, reader).write(os.path.join(work, "ckpt-1"))
    with tf.io.gfile.GFile(os.path.join(work, "checkpoint"), "w") as f:
      f.write('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    model_lib.ModelInfo(
        model=config, corpus=model_lib.CORPUS, corpus_fingerprint=corpus.fingerprint,
        doc_index=os.path.join("index", VERSION), doc_embedder=os.path.join("doc_embedder",
                                                                            VERSION),
        step=_global_step(orqa_checkpoint),
        vocab_fingerprint=run_config.vocab_fingerprint(tokenizer.vocabulary)).write(work)
    if os.path.isdir(output_dir):
      shutil.rmtree(output_dir)
    os.rename(work, output_dir)
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise
  logging.info("Imported the released model %s into %s", orqa_checkpoint, output_dir)
  return output_dir


def imported_dir(directory: str, index_kind: str = "scann",
                 scann: ScannSettings = ScannSettings()) -> Tuple[str, bool]:
  """(the QA model directory of released `directory`, imported now or before; whether it was
  imported now). It goes beside the released directory where writable, else in the cache."""
  checkpoint = released_checkpoint(directory)
  inputs = released_inputs(directory)
  parent = os.path.dirname(os.path.abspath(directory.rstrip("/")))
  target = os.path.abspath(directory.rstrip("/")) + ".realm_tf"
  if not os.access(parent, os.W_OK):
    target = os.path.join(os.path.expanduser("~"), ".cache", "realm_tf", "models",
                          os.path.basename(target))
  stamp = {"checkpoint": os.path.abspath(checkpoint), "index_kind": index_kind, **inputs}
  stamp_path = os.path.join(target, "released.json")
  if tf.io.gfile.exists(stamp_path):
    with tf.io.gfile.GFile(stamp_path) as f:
      if json.load(f) == stamp:
        return target, False
  os.makedirs(os.path.dirname(target), exist_ok=True)
  import_released(checkpoint, inputs["retriever_module_path"], inputs["block_records_path"],
                  target, index_kind=index_kind, scann=scann)
  with tf.io.gfile.GFile(stamp_path, "w") as f:
    json.dump(stamp, f, indent=2)
  return target, True


def is_released_dir(directory: str) -> bool:
  """Whether `directory` is a released ORQA model directory (and not a realm_tf one)."""
  return (not tf.io.gfile.exists(os.path.join(directory, model_lib.MODEL_INFO))
          and released_checkpoint(directory) is not None)



def model_directory(directory: str, index_kind: str = "",
                    scann: ScannSettings = ScannSettings()) -> str:
  """`directory`, or for a released ORQA model directory its imported QA model directory
  (`imported_dir`, with an `index_kind` index, default ScaNN, over the released embeddings)."""
  if not is_released_dir(directory):
    return directory
  target, _ = imported_dir(directory, index_kind or "scann", scann)
  return target
