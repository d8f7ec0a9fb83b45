"""Retrieval-augmented classification on real text: fact verification over Wikipedia lead blocks.

  python bench/classification.py                      # 3 seeds x rows realm, null_only, bm25
  python bench/classification.py --seeds=0 --num_steps=4 --train_examples=32   # a smoke run

Data (`real_data.fact_verification`, recipe seed 0): NQ-open dev questions stated with their
answer (true) or another answer of the same type (false) over the 10,033 Wikipedia lead
extracts, one block per article (its title and first `--block_words` words), split by the
answer block's article; `--train_examples` and `--test_examples` claims are sampled (seed 0)
from each split. The corpus read is the sampled claims' articles plus other articles (title
order) up to `--num_articles`. Rows, each `realm-train --experiment=classification` from
`--init_checkpoint` (a REALM or ICT run) or all-MiniLM-L6-v2 weights, trained `--num_steps`
per seed and evaluated once at the end on the test claims (no model selection): `realm`
(dense retrieval of k blocks + the null document), `null_only` (`task.retrieval=none`: the
same reader on the null document only) and `bm25` (BM25's k blocks + the null document).
Besides accuracy and macro-F1, each run reports `answer_read` (the share of test claims one
of whose evidence blocks, the `EVIDENCE_BLOCKS` read blocks that decided it, holds the
claim's answer) and `accuracy_realm_read` (its accuracy on the claims the `realm` run of its
seed read the answer for: every row on the same claims). A run that reached `--num_steps` in
`--output_dir` before is read back, not retrained. Writes `bench/results/<--name>.{md,json}`
after every run: mean ± sd over the seeds run.
"""
import json
import os
import random
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=wrong-import-position
from realm_tf.demo import wikipedia  # pylint: disable=wrong-import-position
from realm_tf.evaluation.answer_matcher import AnswerMatcher  # pylint: disable=wrong-import-position
from realm_tf.experiments import registry  # pylint: disable=wrong-import-position
from realm_tf.experiments.train_lib import run_experiment  # pylint: disable=wrong-import-position
from realm_tf.qa import datasets  # pylint: disable=wrong-import-position
from realm_tf.real_data import fact_verification as fv  # pylint: disable=wrong-import-position
from realm_tf.real_data.questions import NQ_DEV  # pylint: disable=wrong-import-position
from realm_tf.retrieval.corpus import Corpus  # pylint: disable=wrong-import-position

ROWS = {"realm": "dense", "null_only": "none", "bm25": "bm25"}
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Training seeds.")
_ROWS = flags.DEFINE_list("rows", list(ROWS), f"Rows, of {', '.join(ROWS)}.")
_TRAIN = flags.DEFINE_integer("train_examples", 256, "Training claims sampled.")
_TEST = flags.DEFINE_integer("test_examples", 128, "Test claims sampled.")
_ARTICLES = flags.DEFINE_integer("num_articles", 1000, "Blocks of the corpus read.")
_BLOCK_WORDS = flags.DEFINE_integer("block_words", 40, "Words of a lead extract in its block.")
_STEPS = flags.DEFINE_integer("num_steps", 32, "Training steps a run.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Claims a step.")
_TOP_K = flags.DEFINE_integer("reader_top_k", 2, "Blocks read besides the null document.")
_LR = flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
_OUTPUT = flags.DEFINE_string("output_dir", "/tmp/realm_classification", "Runs and data.")
_NAME = flags.DEFINE_string("name", "classification", "Results under bench/results/<name>.")
_QUERY_LR = flags.DEFINE_float(
    "retriever_learning_rate", None, "The query tower's peak rate "
    "(`trainer.retriever_learning_rate`; default `--learning_rate`, 0 freezes it).")
_DTYPE = flags.DEFINE_enum("compute_dtype", "float32", ["float32", "auto", "bfloat16"],
                           "`runtime.compute_dtype` of every run.")
_INIT = flags.DEFINE_string(
    "init_checkpoint", "", "A REALM pre-training or ICT run (or checkpoint) every row starts "
    "from (`task.init.checkpoint`); empty: all-MiniLM-L6-v2 weights.")


def build_data(output_dir: str):
  """Writes corpus.jsonl, train.jsonl and test.jsonl; returns their paths and the counts."""
  titles, bodies = wikipedia.load_wiki_summaries()
  bodies = [" ".join(body.split()[:_BLOCK_WORDS.value]) for body in bodies]
  claims = fv.build_claims(titles, bodies, datasets.load_examples(NQ_DEV), seed=0)
  sampler = random.Random(0)
  train = [c for c in claims if c.split == "train"]
  test = [c for c in claims if c.split == "test"]
  train = sampler.sample(train, min(_TRAIN.value, len(train)))
  test = sampler.sample(test, min(_TEST.value, len(test)))
  rows = sorted({c.row for c in train + test})
  rows += [r for r in range(len(titles)) if r not in set(rows)][:max(0, _ARTICLES.value -
                                                                      len(rows))]
  rows.sort()
  os.makedirs(output_dir, exist_ok=True)
  paths = {name: os.path.join(output_dir, f"{name}.jsonl") for name in ("corpus", "train",
                                                                         "test")}
  Corpus.from_blocks(rows, [titles[r] for r in rows], [bodies[r] for r in rows]).write_jsonl(
      paths["corpus"])
  fv.write_claims(paths["train"], train)
  fv.write_claims(paths["test"], test)
  counts = {"claims": len(claims), "train": len(train), "test": len(test), "blocks": len(rows),
            "test_true": sum(c.label == "true" for c in test),
            "test_articles_in_train": len({c.title for c in test} & {c.title for c in train})}
  return paths, counts


def run_row(row: str, seed: int, paths):
  """Trains (or reads back) `row` for `seed`: its reported figures, and per test claim
  (answer read, classified right) for `pair_with_realm`."""
  model_dir = os.path.join(_OUTPUT.value, f"{row}_seed{seed}")
  settings = [f"trainer.model_dir={model_dir}", f"trainer.num_steps={_STEPS.value}",
              f"trainer.batch_size={_BATCH.value}", f"trainer.learning_rate={_LR.value}",
              f"trainer.eval_every={_STEPS.value}", f"trainer.checkpoint_every={_STEPS.value}",
              f"trainer.log_every={_STEPS.value}", f"runtime.seed={seed}",
              f"task.corpus={paths['corpus']}", f"task.train_data={paths['train']}",
              f"task.dev_data={paths['test']}",
              f"task.retrieval={ROWS[row]}", f"task.reader_top_k={_TOP_K.value}",
              "task.model.query_length=32", "task.model.block_length=64",
              "task.model.reader_length=96", f"runtime.compute_dtype={_DTYPE.value}"]
  if _QUERY_LR.value is not None:
    settings.append(f"trainer.retriever_learning_rate={_QUERY_LR.value}")
  settings.append(f"task.init.checkpoint={_INIT.value}" if _INIT.value else
                  "task.init.bert_weights=minilm")  # one source of the initial weights
  started = time.perf_counter()
  finished = _finished_eval(model_dir, settings)
  if finished:  # a run of these settings ended before: read back, not retrained
    metrics, seconds = finished
  else:
    metrics = run_experiment(registry.build("classification", params_override=",".join(
        settings)), verbose=False)
    seconds = time.perf_counter() - started
    with open(os.path.join(model_dir, _RUN_FILE), "w", encoding="utf-8") as f:
      json.dump({"settings": settings, "seconds": seconds}, f)
  read, correct = evidence_read(model_dir, paths["test"])
  run = {"row": row, "seed": seed, "accuracy": metrics["accuracy"],
         "macro_f1": metrics["macro_f1"], "seconds": seconds,
         "answer_read": sum(read) / len(read),
         "accuracy_answer_read": _accuracy_where(correct, read),
         "accuracy_answer_not_read": _accuracy_where(correct, [not r for r in read])}
  return run, (read, correct)


_RUN_FILE = "bench_run.json"  # the settings a finished run was trained with, and its seconds


def _finished_eval(model_dir: str, settings: list):
  """(the last evaluation, seconds) of the run in `model_dir` when it was trained with
  `settings` and reached `--num_steps`, else None."""
  paths = [os.path.join(model_dir, name) for name in ("eval.jsonl", _RUN_FILE)]
  if not all(os.path.exists(path) for path in paths):
    return None
  with open(paths[0], encoding="utf-8") as f:
    last = [json.loads(line) for line in f if line.strip()][-1]
  with open(paths[1], encoding="utf-8") as f:
    run = json.load(f)
  if run["settings"] != settings or last["step"] != _STEPS.value:
    return None
  return last, run["seconds"]


def evidence_read(model_dir: str, test_path: str):
  """Per test claim (`predictions.jsonl` is in the test file's order): whether one of its
  evidence blocks (the null document aside; all k blocks read when k < `EVIDENCE_BLOCKS`)
  holds the claim's answer (Open-QA's `has_answer`), and whether it was classified right."""
  with open(test_path, encoding="utf-8") as f:
    claims = [json.loads(line) for line in f]
  with open(os.path.join(model_dir, "predictions.jsonl"), encoding="utf-8") as f:
    predictions = [json.loads(line) for line in f]
  read, correct = [], []
  for claim, prediction in zip(claims, predictions, strict=True):
    matcher = AnswerMatcher([claim["answer"]])
    read.append(any(e["row"] >= 0 and matcher.has_answer(e["text"])
                    for e in prediction["evidence"]))
    correct.append(prediction["predicted"] == claim["label"])
  return read, correct


def _accuracy_where(correct, chosen) -> float:
  """The accuracy over the claims `chosen` marks (nan when none)."""
  picked = [c for c, keep in zip(correct, chosen) if keep]
  return sum(picked) / len(picked) if picked else float("nan")


def pair_with_realm(runs, per_claim) -> None:
  """Adds to each run `accuracy_realm_read`: its accuracy on the test claims for which the
  `realm` run of its seed read a block holding the answer (the same claims for every row);
  `per_claim[(row, seed)]` is that run's (read, correct)."""
  for run in runs:
    realm = per_claim.get(("realm", run["seed"]))
    if realm:
      run["accuracy_realm_read"] = _accuracy_where(per_claim[(run["row"], run["seed"])][1],
                                                   realm[0])


def mean_sd(values) -> str:
  sd = statistics.stdev(values) if len(values) > 1 else 0.0
  return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def settings() -> dict:
  return {flag.name: flag.value for flag in (_TRAIN, _TEST, _ARTICLES, _BLOCK_WORDS, _STEPS,
                                             _BATCH, _TOP_K, _LR, _QUERY_LR, _DTYPE, _INIT)}


def write(runs, counts, rows) -> str:
  """The results of the `runs` so far (each row's mean ± sd over its seeds) under
  bench/results/<--name>; returns the markdown."""
  summary = [{"row": row, "seeds": len(found),
              "accuracy": mean_sd([r["accuracy"] for r in found]),
              "macro_f1": mean_sd([r["macro_f1"] for r in found]),
              "answer_read": mean_sd([r["answer_read"] for r in found]),
              "accuracy_realm_read": mean_sd([r.get("accuracy_realm_read", float("nan"))
                                              for r in found]),
              "seconds_per_run": statistics.mean(r["seconds"] for r in found)}
             for row in rows for found in [[r for r in runs if r["row"] == row]] if found]
  markdown = (f"{bench_utils.machine_line()}\n\nsettings: {settings()}\n\ndata: {counts}\n\n" +
              bench_utils.markdown_table(summary, ["row", "seeds", "accuracy", "macro_f1",
                                                   "answer_read", "accuracy_realm_read",
                                                   "seconds_per_run"]) + "\n" +
              bench_utils.markdown_table(runs, ["row", "seed", "accuracy", "macro_f1",
                                                "answer_read", "accuracy_answer_read",
                                                "accuracy_answer_not_read",
                                                "accuracy_realm_read", "seconds"]))
  bench_utils.write_results(_NAME.value, runs + [dict(s, summary=True) for s in summary] +
                            [dict(counts, data=True, **settings())], markdown)
  return markdown


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  paths, counts = build_data(_OUTPUT.value)
  print(counts, flush=True)
  runs, per_claim = [], {}
  for seed in [int(s) for s in _SEEDS.value]:
    for row in _ROWS.value:
      run, per_claim[(row, seed)] = run_row(row, seed, paths)
      runs.append(run)
      pair_with_realm(runs, per_claim)
      print(run, flush=True)
      markdown = write(runs, counts, _ROWS.value)  # kept after every run
  print(markdown)


if __name__ == "__main__":
  app.run(main)
