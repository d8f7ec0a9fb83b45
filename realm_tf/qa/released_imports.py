"""Where and when Google's released ORQA model directories are imported: one import per
release and inputs, one index in it per index setting, each reused while nothing that shapes
it changes.

    <release>.realm_tf/     beside the release (~/.cache/realm_tf/models/ where not writable)
      released.json         what the import was made of (`input_stamp`), block_emb rows verified
      model.json, vocab.txt, corpus/, doc_embedder/, ckpt-1.*   the QA model directory
      embeddings/<dtype>/   block_emb, verified, shared by the indexes (`qa.released_indexes`)
      index/<setting>/      one per index kind, ScaNN settings, shard size and storage dtype

The checkpoint, embedder, vocabulary, blocks, block_emb (each file by path, size and mtime)
and the attention heads shape the import. `--verify_blocks` shapes nothing but is never
skipped: rows beyond those the import was verified on are verified now, and a mismatch removes
the import, so that it is never used. docs/reproduce.md §2 is the user's account.
"""
import dataclasses
import json
import os
import shutil
from typing import Any, Dict, List, Tuple, Union

from absl import logging
import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import released_embeddings
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.qa import embedding_check
from realm_tf.qa import model as model_lib
from realm_tf.qa import released_indexes
from realm_tf.qa import released_model
from realm_tf.qa.doc_index import DocIndex
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder

FORMAT = 2  # 1: one import per release, its index kind in released.json
STAMP = "released.json"
SUFFIX = ".realm_tf"


@dataclasses.dataclass(frozen=True)
class ReleasedSettings:
  """How a released directory is imported, besides its index's settings.

  Attributes:
    verify_blocks: rows of block_emb re-embedded to check that they pair with the blocks: a
      number (spread over the corpus) or "all" (`qa.embedding_check`).
    num_attention_heads: the towers' heads; 0: the release's bert_config.json, else inferred
      (`released_model.attention_heads`).
    storage_dtype: the dtype the imported embeddings are stored in.
  """
  verify_blocks: Union[int, str] = embedding_check.DEFAULT_ROWS
  num_attention_heads: int = 0
  storage_dtype: str = "float32"

  def __post_init__(self):
    object.__setattr__(self, "verify_blocks", embedding_check.check_rows(self.verify_blocks))
    if isinstance(self.num_attention_heads, bool) or self.num_attention_heads < 0:
      raise errors.InputError(errors.describe(
          "--released_num_attention_heads", f"{self.num_attention_heads!r} heads",
          "Pass a positive number, or 0 to read or infer it"))
    embedding_file.check_storage_dtype(self.storage_dtype)


@dataclasses.dataclass(frozen=True)
class ImportedModel:
  """The import a run uses: its model `directory`, the `doc_index` directory of its setting,
  what this call built ("import", "index") and how many rows of block_emb were verified."""
  directory: str
  doc_index: str
  built: Tuple[str, ...]
  verified_rows: int
  num_blocks: int


def import_dir(directory: str) -> str:
  """Where released `directory` is imported: beside it where writable, else in the cache."""
  target = os.path.abspath(directory.rstrip("/")) + SUFFIX
  if os.access(os.path.dirname(target), os.W_OK):
    return target
  return os.path.join(os.path.expanduser("~"), ".cache", "realm_tf", "models",
                      os.path.basename(target))


def _files(*patterns: str) -> List[List[Any]]:
  """[path, bytes, mtime_ns] of the files matching `patterns`."""
  found = sorted({p for pattern in patterns for p in tf.io.gfile.glob(pattern)})
  return [[os.path.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns] for p in found]


def input_stamp(checkpoint: str, inputs: Dict[str, str], heads: int) -> Dict[str, Any]:
  """What shapes an import: its input files (path, size, mtime) and the attention heads."""
  embedder, blocks = inputs["retriever_module_path"], inputs["block_records_path"]
  block_emb = released_embeddings.checkpoint_prefix(released_model.block_emb_path(embedder))
  folder = os.path.dirname(blocks)
  return {"format": FORMAT, "checkpoint": _files(checkpoint + ".*"),
          "embedder": _files(os.path.join(embedder, "variables", "variables.*"),
                             os.path.join(embedder, "assets", "vocab.txt")),
          "blocks": _files(blocks, os.path.join(folder, "titles.tfr"),
                           os.path.join(folder, "examples.tfr")),
          "block_emb": _files(block_emb + ".*"), "num_attention_heads": heads}


def _read(target: str) -> Dict[str, Any]:
  path = os.path.join(target, STAMP)
  if not os.path.exists(path) or not os.path.exists(os.path.join(target, model_lib.MODEL_INFO)):
    return {}
  with open(path) as f:
    return json.load(f)


def _write(target: str, record: Dict[str, Any]) -> None:
  path = os.path.join(target, STAMP)
  with open(path + ".tmp", "w") as f:
    json.dump(record, f, indent=2)
  os.replace(path + ".tmp", path)


def _verify_more(target: str, record: Dict[str, Any], inputs: Dict[str, str],
                 settings: ReleasedSettings, heads: released_model.Heads) -> Dict[str, Any]:
  """`record`, after verifying `settings.verify_blocks` rows when that is more than it was
  verified on (a mismatch removes the import)."""
  wanted = embedding_check.rows_checked(settings.verify_blocks, record["num_blocks"])
  if wanted <= record["verified_rows"]:
    return record
  embedder = inputs["retriever_module_path"]
  info = model_lib.ModelInfo.read(target)
  try:
    _, verified = released_model.verify_block_emb(
        DocEmbedder(os.path.join(target, info.doc_embedder)),
        Corpus.load(inputs["block_records_path"]), released_model.block_emb_path(embedder),
        embedder, settings.verify_blocks, heads.inferred)
  except errors.EmbeddingMismatchError:
    shutil.rmtree(target, ignore_errors=True)
    raise
  record = dict(record, verified_rows=verified)
  _write(target, record)
  return record


def imported_model(directory: str, index_kind: str = "scann",
                   scann: ScannSettings = ScannSettings(), sharding: Sharding = Sharding(),
                   settings: ReleasedSettings = ReleasedSettings()) -> ImportedModel:
  """The import of released `directory` for these settings: imported now, or before and
  reused (module docstring).

  Raises:
    FileNotFoundError: an input the release names is missing (`released_inputs`).
    InputError / CheckpointMismatchError: files that do not fit together, each message naming
      what to do (`released_model.import_released`).
  """
  checkpoint = released_model.released_checkpoint(directory)
  inputs = released_model.released_inputs(directory)
  heads = released_model.attention_heads(directory, inputs["retriever_module_path"],
                                         settings.num_attention_heads)
  stamp = input_stamp(checkpoint, inputs, heads.count)
  target = import_dir(directory)
  record, built = _read(target), []
  if record.get("inputs") != stamp:
    old = record.get("inputs") or {}
    changed = [key for key in stamp if old.get(key) != stamp[key]]
    reason = (f"changed: {', '.join(changed)}" if old else
              "an import of an older format there" if record else "not imported yet")
    logging.info("Importing the released model %s into %s (%s)", directory, target, reason)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    verified = released_model.import_released(
        checkpoint, inputs["retriever_module_path"], inputs["block_records_path"], target,
        index_kind=index_kind, scann=scann, sharding=sharding,
        storage_dtype=settings.storage_dtype,
        num_attention_heads=0 if heads.inferred else heads.count,
        verify_blocks=settings.verify_blocks)
    info = model_lib.ModelInfo.read(target)
    num_blocks = DocIndex.read_info(os.path.join(target, info.doc_index))["num_blocks"]
    record = {"inputs": stamp, "verified_rows": verified, "num_blocks": num_blocks}
    _write(target, record)
    built.append("import")
  else:
    record = _verify_more(target, record, inputs, settings, heads)
  if not os.path.exists(released_indexes.embeddings_path(target, settings.storage_dtype)):
    array, _ = released_embeddings.open_released_embeddings(  # the file verified at import
        released_model.block_emb_path(inputs["retriever_module_path"]))
    released_indexes.write_embeddings(target, array, settings.storage_dtype)
  info = model_lib.ModelInfo.read(target)
  doc_index, new = released_indexes.add_index(target, info.corpus_fingerprint, index_kind,
                                              scann, sharding, settings.storage_dtype)
  if new or built:  # an import builds the index of its first setting
    built.append("index")
  imported = ImportedModel(target, os.path.join(target, doc_index), tuple(built),
                           record["verified_rows"], record["num_blocks"])
  sampled = imported.verified_rows < imported.num_blocks
  logging.info(
      "Released model %s: using the import %s (%s), index %s (%s); block_emb verified on %d of "
      "%d rows%s", directory, target, "built now" if "import" in built else "reused",
      doc_index, "built now" if "index" in built else "reused", imported.verified_rows,
      imported.num_blocks,
      " (--verify_blocks=all checks every row)" if sampled else "")
  return imported


def model_directory(directory: str, index_kind: str = "", scann: ScannSettings = ScannSettings(),
                    sharding: Sharding = Sharding(),
                    settings: ReleasedSettings = ReleasedSettings()) -> Tuple[str, str]:
  """(the QA model directory, the `DocIndex` directory to use or "" for its own): `directory`
  itself, or for a released ORQA model directory its import for `index_kind` (default ScaNN),
  `scann` and `sharding` (`imported_model`)."""
  if not released_model.is_released_dir(directory):
    return directory, ""
  imported = imported_model(directory, index_kind or "scann", scann, sharding, settings)
  return imported.directory, imported.doc_index
