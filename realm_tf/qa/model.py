"""A fine-tuned Open-QA model on disk: its model.json, checks and loading.

The model directory (`qa.finetune_lib` writes it, `QAModel.load` reads it; docs/training.md):
`model.json` (`ModelInfo`: configs, vocabulary, corpus, doc index and embedder, metrics),
`vocab.txt`, `corpus/` (a copy in the on-disk corpus form, so that the directory can move),
`doc_embedder/step-<S>/` and `index/step-<S>/` (the doc tower snapshot of step S and the
`DocIndex` it embedded), `ckpt-<N>.*` and `best/` (the best dev checkpoint, with its own
model.json). The retriever always has separate towers; a pre-trained retriever with shared
towers initialises both. Configs and initial weights are `realm_tf.presets`'.

Loading is checked, since a model directory may come from elsewhere: every path in model.json
is relative and stays inside the directory, and the vocabulary and model.json must fit the
checkpoint (`errors.InputError` naming the file). Answering over the model's own corpus runs
no graph from the directory; only another `corpus=` loads the doc-embedder SavedModel.
"""
import dataclasses
import json
import os
import tempfile
from typing import Dict, Optional, Tuple

import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.models import precision
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.doc_index import index_corpus
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.block_fit import check_blocks_fit
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_attributes
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config

MODEL_INFO = "model.json"
VOCAB = "vocab.txt"
CORPUS = "corpus"
BEST_DIR = "best"
_PATH_KEYS = ("vocab_file", "corpus", "doc_index", "doc_embedder")


@dataclasses.dataclass
class ModelInfo:
  """`model.json`: everything besides the weights needed to rebuild a fine-tuned model.

  Paths are relative to the directory holding `model.json` and stay inside the model directory
  (`resolve`).
  """
  model: ModelConfig
  corpus: str
  corpus_fingerprint: str
  doc_index: str
  doc_embedder: str
  dataset: str = "nq"
  vocab_file: str = VOCAB
  step: int = 0
  metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
  vocab_fingerprint: str = ""

  def write(self, directory: str) -> None:
    values = dataclasses.asdict(self)
    values["model"] = self.model.to_dict()
    tmp = os.path.join(directory, MODEL_INFO + ".tmp")
    with tf.io.gfile.GFile(tmp, "w") as f:
      json.dump(values, f, indent=2, sort_keys=True)
    tf.io.gfile.rename(tmp, os.path.join(directory, MODEL_INFO), overwrite=True)

  @classmethod
  def read(cls, directory: str) -> "ModelInfo":
    path = os.path.join(directory, MODEL_INFO)
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"{directory} is not a fine-tuned QA model (no {MODEL_INFO})")
    try:
      with tf.io.gfile.GFile(path, "r") as f:
        values = json.load(f)
      values["model"] = ModelConfig.from_dict(values["model"])
      return cls(**values)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
      raise errors.InputError(errors.describe(
          path, f"not a model.json of this version ({type(e).__name__}: {e})",
          "Restore model.json as fine-tuning wrote it")) from e


def model_root(directory: str) -> str:
  """The model directory that confines `directory`'s paths: `<model_dir>` for its `best/`."""
  directory = os.path.normpath(directory)
  parent = os.path.dirname(directory)
  if os.path.basename(directory) == BEST_DIR and tf.io.gfile.exists(
      os.path.join(parent, MODEL_INFO)):
    return parent
  return directory


def resolve(directory: str, info: "ModelInfo", key: str) -> str:
  """The path under `key` of `directory`'s model.json, which must be relative and resolve
  inside the model directory (`model_root`; symbolic links followed).

  Raises:
    errors.InputError: an absolute path, a URL or one that leaves the model directory.
  """
  value = getattr(info, key)
  root = model_root(directory)
  real = lambda p: p if "://" in p else os.path.realpath(p)
  inside = isinstance(value, str) and value and not os.path.isabs(value) and "://" not in value
  if inside:
    path = os.path.normpath(os.path.join(directory, value))
    inside = os.path.commonpath([real(root), real(path)]) == real(root)
  if not inside:
    raise errors.InputError(errors.describe(
        os.path.join(directory, MODEL_INFO),
        f"{key} {value!r} is not a relative path inside the model directory {root}",
        "Paths in model.json must stay inside the model directory (a downloaded model must "
        "not read files elsewhere): restore model.json as fine-tuning wrote it, or pass the "
        "file as a flag (e.g. --corpus)"))
  return path


def _encoder_layers(shapes: Dict[str, list], prefix: str) -> int:
  found = {k[len(prefix):].split("/", 1)[0] for k in shapes if k.startswith(prefix)}
  return len(found)


def check_model_dir(directory: str, info: "ModelInfo", tokenizer: WordpieceTokenizer,
                    checkpoint: str, retriever: Retriever, reader: Reader) -> None:
  """Verifies vocab.txt and model.json against the checkpoint before restoring it.

  Raises:
    errors.InputError: naming vocab.txt (size or fingerprint of another vocabulary) or
      model.json (layers, vocabulary or variables the checkpoint does not hold).
  """
  info_path = os.path.join(directory, MODEL_INFO)
  vocab_path = resolve(directory, info, "vocab_file")
  shapes = {k[:-len("/.ATTRIBUTES/VARIABLE_VALUE")]: s
            for k, s in tf.train.list_variables(checkpoint)
            if k.startswith(("retriever/", "reader/")) and ".OPTIMIZER_SLOT" not in k and
            k.endswith("/.ATTRIBUTES/VARIABLE_VALUE")}
  table = next((shapes[k] for k in ("reader/encoder/_embedding_layer/embeddings",
                                     "reader/masked_lm/embedding_table") if k in shapes), None)
  fix_info = "Restore model.json as fine-tuning wrote it, or load the model directory it "\
             "belongs to"
  if table and tokenizer.vocab_size != table[0]:
    raise errors.InputError(errors.describe(
        vocab_path, f"{tokenizer.vocab_size} wordpieces, but the embedding table of the "
        f"checkpoint {checkpoint} has {table[0]} rows",
        "Restore the vocab.txt the model was fine-tuned with"))
  if info.vocab_fingerprint and run_config.vocab_fingerprint(
      tokenizer.vocabulary) != info.vocab_fingerprint:
    raise errors.InputError(errors.describe(
        vocab_path, "not the vocabulary the model was fine-tuned with (its fingerprint in "
        "model.json differs)", "Restore the vocab.txt the model was fine-tuned with"))
  encoder = info.model.encoder
  layers = _encoder_layers(shapes, "reader/encoder/_transformer_layers/")
  if layers and layers != encoder.num_layers:
    raise errors.InputError(errors.describe(
        info_path, f"encoder.num_layers is {encoder.num_layers}, but the checkpoint "
        f"{checkpoint} holds {layers} transformer layers per encoder", fix_info))
  if table and list(table) != [encoder.vocab_size, encoder.hidden_size]:
    raise errors.InputError(errors.describe(
        info_path, f"encoder.vocab_size x hidden_size is {encoder.vocab_size} x "
        f"{encoder.hidden_size}, but the checkpoint {checkpoint} has a {table[0]} x "
        f"{table[1]} embedding table", fix_info))
  variables = {id(v): v for v in retriever.variables + reader.variables}.values()
  expected = sorted(tuple(v.shape.as_list()) for v in variables)
  found = sorted(tuple(s) for s in shapes.values())
  if expected != found:
    raise errors.InputError(errors.describe(
        info_path, f"the model it describes ({len(expected)} variables) does not fit the "
        f"checkpoint {checkpoint} ({len(found)} variables, of other shapes)", fix_info))


def copy_corpus(corpus: Corpus, model_dir: str) -> None:
  """Copies the on-disk `corpus` into `model_dir` (so that the directory can move; hard links
  where it can), unless the copy is there already (its fingerprint in model.json)."""
  path = os.path.join(model_dir, CORPUS)
  if tf.io.gfile.exists(path) and tf.io.gfile.exists(os.path.join(model_dir, MODEL_INFO)) and (
      ModelInfo.read(model_dir).corpus_fingerprint == corpus.fingerprint):
    return
  corpus_files.copy_corpus(corpus.directory, path)


def model_checkpoint(retriever: Retriever, reader: Reader, **extra) -> tf.train.Checkpoint:
  """The checkpoint layout of fine-tuned models (plus optimizer/step items in training)."""
  return tf.train.Checkpoint(retriever=retriever, reader=reader, **extra)


@dataclasses.dataclass
class QAModel:
  """A loaded fine-tuned QA model with its corpus and document index.

  Attributes:
    info: its `ModelInfo`.
    directory: the model directory.
    tokenizer, retriever, reader: the models (separate retriever towers).
    doc_embedder_path: the doc-embedder export of the doc tower (`doc_embedder` loads it).
    corpus, doc_index: the knowledge corpus and its index.
  """
  info: ModelInfo
  directory: str
  tokenizer: WordpieceTokenizer
  retriever: Retriever
  reader: Reader
  doc_embedder_path: str
  corpus: Corpus
  doc_index: DocIndex
  _systems: Dict[Tuple[int, int], RetrieveAndRead] = dataclasses.field(
      default_factory=dict, repr=False, compare=False)
  _doc_embedder: Optional[DocEmbedder] = dataclasses.field(default=None, repr=False,
                                                           compare=False)
  _staging: Optional[tempfile.TemporaryDirectory] = dataclasses.field(default=None, repr=False,
                                                                      compare=False)

  @property
  def config(self) -> ModelConfig:
    return self.info.model

  @property
  def doc_embedder(self) -> DocEmbedder:
    """The doc-embedder SavedModel, loaded on first use (to embed another corpus)."""
    if self._doc_embedder is None:
      self._doc_embedder = DocEmbedder(self.doc_embedder_path)
    return self._doc_embedder

  @classmethod
  def load(cls, directory: str, corpus: str = "", embeddings_dir: str = "",
           index_kind: str = "", scann: ScannSettings = ScannSettings(),
           sharding: Sharding = Sharding(), embedding_dtype: str = "float32",
           doc_index: str = "", compute_dtype: str = "float32") -> "QAModel":
    """Loads a model directory (or its `best/`) and its latest checkpoint, checked (see the
    module docstring).

    Args:
      directory: a directory written by fine-tuning (`<model_dir>` or `<model_dir>/best`).
      corpus: optional path of another knowledge corpus (`Corpus.load`), anywhere; it is
        embedded with the model's doc embedder (paper Appendix C: new knowledge without
        retraining), the one case that loads the doc-embedder SavedModel.
      embeddings_dir: with `corpus`, precomputed embeddings to verify and use instead.
        Embeddings made or read for `corpus` are stored (memory-mapped, in a temporary
        directory) in the dtype of the model's own index.
      index_kind: with `corpus`, the MIPS index to build (default: the model's own kind).
      scann, sharding: with `corpus`, the ScaNN settings of a "scann" index, and its shard size.
      embedding_dtype: with `corpus`, the precision it is embedded in ("float32", "bfloat16"
        or "auto": `models.precision`); where the model's own doc index was embedded in
        another, `doc_embedder` becomes a copy of the model's doc-embedder export computing in
        it (written from the checkpoint's doc tower
        into a temporary directory that lives as long as the model).
      doc_index: a `DocIndex` directory to use instead of the one model.json names (an
        imported released model's index of one setting, `qa.released_imports`).
      compute_dtype: the precision the query tower and the reader answer in ("float32",
        "bfloat16" or "auto": `models.precision`; bfloat16: Keras mixed_bfloat16, float32
        variables, query embeddings and span logits cast to float32).

    Raises:
      FileNotFoundError: not a model directory, or no checkpoint in it.
      errors.InputError: a path of model.json outside the model directory or missing,
        vocab.txt or model.json that does not fit the checkpoint.
      EmbeddingMismatchError: the corpus and its embeddings or index disagree, or the index
        was embedded in another `doc_input` form than the model's.
    """
    info = ModelInfo.read(directory)
    paths = {key: resolve(directory, info, key) for key in _PATH_KEYS}
    paths["doc_index"] = doc_index or paths["doc_index"]
    for key in _PATH_KEYS:
      if not tf.io.gfile.exists(paths[key]):
        raise errors.InputError(errors.describe(
            paths[key], f"missing, though {os.path.join(directory, MODEL_INFO)} names it as "
            f"the model's {key}: the model directory is incomplete",
            "Copy the whole model directory as fine-tuning wrote it"))
    tokenizer = WordpieceTokenizer.from_vocab_file(paths["vocab_file"])
    path = tf.train.latest_checkpoint(directory)
    if not path:
      raise FileNotFoundError(f"no checkpoint in {directory}")
    with precision.policy_scope(compute_dtype):
      retriever, reader = build_models(info.model)
    check_model_dir(directory, info, tokenizer, path, retriever, reader)
    tf2_checkpoint.restore_checked(model_checkpoint(retriever, reader), path, read=True)
    model = cls(info, directory, tokenizer, retriever, reader, paths["doc_embedder"], None,
                None)
    if corpus:
      model.corpus = Corpus.load(corpus)
      check_blocks_fit(model.corpus, tokenizer, info.model.block_length, directory)
      own = DocIndex.read_info(paths["doc_index"])
      kind = index_kind or own["kind"]
      dtype = precision.resolve(embedding_dtype)
      if dtype != own.get("embedding_dtype", "float32"):
        model._export_doc_embedder(dtype)  # pylint: disable=protected-access
      model.doc_index = index_corpus(model.doc_embedder, model.corpus, embeddings_dir,
                                     kind=kind, scann=scann, sharding=sharding,
                                     embedding_dtype=dtype,
                                     storage_dtype=own[embedding_file.STORAGE_KEY])
    else:
      model.corpus = Corpus.load(paths["corpus"])
      check_blocks_fit(model.corpus, tokenizer, info.model.block_length, directory)
      model.doc_index = DocIndex.load(paths["doc_index"], model.corpus)
      doc_inputs.check_index(model.doc_index.doc_input, info.model.doc_input,
                             paths["doc_index"])
    return model

  def _export_doc_embedder(self, compute_dtype: str) -> None:
    """Points `doc_embedder` at a copy of its export (same attributes, the checkpoint's doc
    tower) that computes in `compute_dtype`."""
    attributes = export_attributes(self.doc_embedder_path)
    self._staging = tempfile.TemporaryDirectory(prefix="realm_doc_embedder_")
    path = os.path.join(self._staging.name, os.path.basename(self.doc_embedder_path))
    export_doc_embedder(self.retriever, path, self.tokenizer.cls_id, self.tokenizer.sep_id,
                        self.tokenizer.pad_id, block_length=attributes.block_length,
                        snapshot_step=attributes.snapshot_step, tokenizer=self.tokenizer,
                        compute_dtype=compute_dtype,
                        length_multiple=attributes.length_multiple,
                        jit_compile=attributes.jit_compile)
    self.doc_embedder_path, self._doc_embedder = path, None

  def system(self, k: int = 5, batch_size: int = 16) -> RetrieveAndRead:
    """The retrieve-and-read system over the model's corpus, reading `k` blocks (one per
    configuration, so its traced functions are reused)."""
    key = (k, batch_size)
    if key not in self._systems:
      self._systems[key] = make_system(self.retriever, self.reader, self.tokenizer, self.config,
                                       self.corpus, self.doc_index, k, batch_size)
    return self._systems[key]


def make_system(retriever: Retriever, reader: Reader, tokenizer: WordpieceTokenizer,
                config: ModelConfig, corpus: Corpus, doc_index: DocIndex, k: int = 5,
                batch_size: int = 16) -> RetrieveAndRead:
  """A `RetrieveAndRead` over `corpus` with the lengths of `config`."""
  return RetrieveAndRead(retriever, reader, tokenizer, doc_index.index, corpus.titles,
                         corpus.texts, k=k, query_length=config.query_length,
                         block_length=config.block_length, reader_length=config.reader_length,
                         block_ids=corpus.block_ids, batch_size=batch_size,
                         span_normalization=config.span_normalization)


def find_model_dir(directory: str) -> str:
  """`directory/best` when fine-tuning wrote one, else `directory`."""
  best = os.path.join(directory, "best")
  return best if tf.io.gfile.exists(os.path.join(best, MODEL_INFO)) else directory


