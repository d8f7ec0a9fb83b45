"""Re-runs one system's fine-tuning on a finished knowledge-world ablation seed, with settings
changed, and shows whether fine-tuning kept the retriever (issue #59).

    python bench/ablations.py --size=full --variants=realm --seeds=1 --processes=1 \
        --output_dir=/tmp/abl --results_dir=/tmp/abl/results --name=s1
    python bench/ablation_refinetune.py --output_dir=/tmp/abl --seed=1 --name=base --eval_every=10
    python bench/ablation_refinetune.py --output_dir=/tmp/abl --seed=1 --name=q3e-4 \
        --eval_every=10 --set=trainer.retriever_learning_rate=3e-4

The seed's world and pre-trained checkpoints are reused (the world is rewritten, the same for
the seed); fine-tuning goes to `<seed>/finetune/rerun-<name>`. Printed: dev recall@5 / EM at
every evaluation, the training losses and the share of questions with an answer among the top
K in sixths of the run, test EM and recall@5/@K of the best (dev EM) and of the last
checkpoint, and the retrieval score spread over the top K blocks (top score minus K-th, mean
over test questions) of the pre-trained and of the last query tower: fine-tuning that lost the
retriever flattens the top K (the retriever loss's degenerate minimum) while their scores
over all blocks keep their spread. One JSON line (`RESULT`) at the end.
"""
import dataclasses
import json
import os
import sys

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from realm_tf.evaluation.answer_matcher import AnswerMatcher  # pylint: disable=wrong-import-position
from realm_tf.experiments.train_lib import run_experiment  # pylint: disable=wrong-import-position
from realm_tf.knowledge_world import ablation_config  # pylint: disable=wrong-import-position
from realm_tf.knowledge_world.ablation_runner import AblationRunner  # pylint: disable=wrong-import-position
from realm_tf.models.saving import load_model  # pylint: disable=wrong-import-position
from realm_tf.qa.evaluate_lib import EvalConfig  # pylint: disable=wrong-import-position
from realm_tf.qa.evaluate_lib import evaluate  # pylint: disable=wrong-import-position
from realm_tf.qa.model import QAModel  # pylint: disable=wrong-import-position
from realm_tf.qa.model import find_model_dir  # pylint: disable=wrong-import-position
from realm_tf.retrieval.embedding import DocTower  # pylint: disable=wrong-import-position
from realm_tf.retrieval.embedding import embed_blocks  # pylint: disable=wrong-import-position
from realm_tf.tokenization.featurizers import Featurizer  # pylint: disable=wrong-import-position
from realm_tf.training.train_loop import read_step_records  # pylint: disable=wrong-import-position

_SIZE = flags.DEFINE_enum("size", "full", ["full", "small"], "The seed's preset.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "/tmp/realm_ablations",
                                  "bench/ablations.py's --output_dir of the finished seed.")
_SEED = flags.DEFINE_integer("seed", 1, "The seed.")
_VARIANT = flags.DEFINE_string("variant", "realm", "The system fine-tuned.")
_NAME = flags.DEFINE_string("name", "base", "Run name: <seed>/finetune/rerun-<name>.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", None, "Dev evaluation period (default the "
                                   "preset's; evaluations do not change training).")
_SET = flags.DEFINE_multi_string("set", [], "key=value, an open_qa setting (JSON value).")


def _value(text: str):
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return text


def _spread(retriever, runner, k: int) -> dict:
  """Test recall@5 and the mean score gap between the 1st and the k-th block."""
  tokenizer, store = runner.tokenizer, runner.store
  tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                   block_length=runner.lengths["block"])
  docs = np.asarray(embed_blocks(tower, *store.wordpieces(tokenizer)))
  featurize = Featurizer(tokenizer, runner.lengths["qa_query"], runner.lengths["block"]).queries
  query = retriever.embed_query(featurize(tf.constant([e.question for e in runner.test])),
                                training=False).numpy()
  scores = query @ docs.T  # [Q, N]
  top = -np.sort(-scores, axis=1)
  order = np.argsort(-scores, axis=1)[:, :5]
  found = [any(AnswerMatcher(e.answers, e.match).has_answer(store.texts[r]) for r in row)
           for e, row in zip(runner.test, order)]
  return {"r5": float(np.mean(found)), "top_k_spread": float(np.mean(top[:, 0] - top[:, k - 1])),
          "all_blocks_std": float(scores.std(axis=1).mean())}


def main(argv):
  del argv
  preset = (ablation_config.full_config if _SIZE.value == "full" else
            ablation_config.small_config)
  config = preset(_OUTPUT_DIR.value).for_seed(_SEED.value)
  if _EVAL_EVERY.value:
    config = dataclasses.replace(config, eval_every=_EVAL_EVERY.value)
  runner = AblationRunner(config, log=lambda message: print(message, flush=True))
  runner.write_world()
  model_dir = runner._path("finetune", f"rerun-{_NAME.value}")  # pylint: disable=protected-access
  if tf.io.gfile.exists(model_dir):
    tf.io.gfile.rmtree(model_dir)
  settings = {key: _value(value) for key, value in (s.split("=", 1) for s in _SET.value)}
  init = runner._init_checkpoint(_VARIANT.value)  # pylint: disable=protected-access
  experiment = runner.finetune_experiment(_VARIANT.value, model_dir, init, settings)
  run_experiment(experiment, verbose=False)
  k = min(experiment.task.retriever_top_k, len(runner.store))
  out = {"name": _NAME.value, "seed": _SEED.value, "size": _SIZE.value, "set": _SET.value}
  out["dev"] = [{key: e[key] for key in ("step", "exact_match", "recall@5")}
                for e in read_step_records(os.path.join(model_dir, "eval.jsonl"))]
  records = read_step_records(os.path.join(model_dir, "metrics.jsonl"))
  chunk = max(1, len(records) // 6)
  out["train"] = [dict(steps=f"{begin}-{begin + chunk}", **{
      key: round(float(np.mean([r[key] for r in records[begin:begin + chunk]])), 3)
      for key in ("retriever_loss", "reader_loss", "retrieved_answer", "read_answer")})
                  for begin in range(0, len(records), chunk)]
  retriever_run = ablation_config.SYSTEMS[_VARIANT.value][0]
  pretrained = load_model(runner._path("ict", "retriever") if retriever_run == "ict" else  # pylint: disable=protected-access
                          runner._path("pretrain", retriever_run, "retriever"))  # pylint: disable=protected-access
  out["pretrained"] = _spread(pretrained, runner, k)
  for which, directory in (("best", find_model_dir(model_dir)), ("last", model_dir)):
    model = QAModel.load(directory)
    result = evaluate(model.system(k=config.reader_top_k), runner.test,
                      EvalConfig(recall_ks=(config.recall_k, k)))
    out[which] = {"step": model.info.step, "em": result.metrics["exact_match"],
                  "r5": result.metrics[f"recall@{config.recall_k}"],
                  f"r{k}": result.metrics.get(f"recall@{k}")}
    if which == "last":
      out[which].update(_spread(model.retriever, runner, k))
  print("dev R@5/EM: " + " ".join(f"{d['step']}:{d['recall@5']:.3f}/{d['exact_match']:.3f}"
                                  for d in out["dev"]))
  print("train: " + " ".join(f"[{t['steps']} retriever_loss={t['retriever_loss']:.2f} "
                             f"answer_in_top_k={t['retrieved_answer']:.2f}]"
                             for t in out["train"]))
  print(f"pre-trained: {out['pretrained']}\nbest: {out['best']}\nlast: {out['last']}")
  print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
  app.run(main)
