"""`realm-demo`: REALM end to end on real data (see `realm_tf.demo.stages`).

    realm-demo                   # the default run: ~13 min on 2 CPU cores, in results/demo
    realm-demo --question="who painted the mona lisa?"   # ask your own (re-runs `ask` only)
    realm-demo --output_dir=results/demo_full --num_docs=0 --block_length=288 \\
        --ict_steps=1000 --pretrain_steps=2000 --pretrain_batch_size=16 \\
        --refresh_every=100 --finetune_steps=2000 --eval_questions=0   # every stage scaled up

Everything goes to --output_dir; a re-run reuses the completed stages and resumes an
interrupted one, --overwrite starts over.
"""
from absl import flags
from absl import logging

from realm_tf import cli
from realm_tf.demo.config import DemoConfig
from realm_tf.flag_groups import beam_pipelines
from realm_tf.flag_groups import index
from realm_tf.flag_groups import lengths
from realm_tf.flag_groups import model
from realm_tf.flag_groups import open_qa
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import pretraining
from realm_tf.flag_groups import qa_model
from realm_tf.flag_groups import runtime

_DEFAULTS = DemoConfig()
_OUTPUT_DIR = paths.output_dir("Where everything goes.", default=_DEFAULTS.output_dir)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Start over instead of resuming.")
_NUM_DOCS = flags.DEFINE_integer("num_docs", _DEFAULTS.num_docs,
                                 "Wikipedia articles indexed (0: all 10,033).", lower_bound=0)
_ENCODER = model.encoder(_DEFAULTS.encoder, choices=["minilm_l6", "tiny"])
_BLOCK_LENGTH = lengths.block_length(_DEFAULTS.block_length)
_QUERY_LENGTH = lengths.query_length(_DEFAULTS.query_length)
_DEV_PERCENT = flags.DEFINE_integer("dev_percent", _DEFAULTS.dev_percent,
                                    "Answerable questions held out for dev (by hash), %.",
                                    lower_bound=1, upper_bound=99)
_EVAL_QUESTIONS = flags.DEFINE_integer("eval_questions", _DEFAULTS.eval_questions,
                                       "Dev questions evaluated (0: all).", lower_bound=0)
_ICT_STEPS = flags.DEFINE_integer("ict_steps", _DEFAULTS.ict_steps, "ICT steps.", lower_bound=1)
_ICT_BATCH = flags.DEFINE_integer("ict_batch_size", _DEFAULTS.ict_batch_size,
                                  "ICT batch (in-batch negatives).", lower_bound=1)
_ICT_LR = flags.DEFINE_float("ict_learning_rate", _DEFAULTS.ict_learning_rate,
                             "ICT peak learning rate.", lower_bound=0)
_MLM_WARMUP_STEPS = pretraining.mlm_warmup_steps(_DEFAULTS.mlm_warmup_steps)
_PRETRAIN_STEPS = flags.DEFINE_integer("pretrain_steps", _DEFAULTS.pretrain_steps,
                                       "REALM pre-training steps.", lower_bound=1)
_PRETRAIN_BATCH = flags.DEFINE_integer("pretrain_batch_size", _DEFAULTS.pretrain_batch_size,
                                       "REALM pre-training batch.", lower_bound=1)
_PRETRAIN_LR = flags.DEFINE_float("pretrain_learning_rate", _DEFAULTS.pretrain_learning_rate,
                                  "REALM pre-training peak learning rate.", lower_bound=0)
_NUM_CANDIDATES = pretraining.num_candidates(_DEFAULTS.num_candidates)
_REFRESH_EVERY = index.refresh_every(_DEFAULTS.refresh_every)
_FINETUNE_STEPS = flags.DEFINE_integer("finetune_steps", _DEFAULTS.finetune_steps,
                                       "Open-QA fine-tuning steps.", lower_bound=1)
_FINETUNE_BATCH = flags.DEFINE_integer("finetune_batch_size", _DEFAULTS.finetune_batch_size,
                                       "Questions per fine-tuning step.", lower_bound=1)
_FINETUNE_LR = flags.DEFINE_float("finetune_learning_rate", _DEFAULTS.finetune_learning_rate,
                                  "Fine-tuning: the reader's peak learning rate.", lower_bound=0)
_FINETUNE_RETRIEVER_LR = flags.DEFINE_float(
    "finetune_retriever_learning_rate", _DEFAULTS.finetune_retriever_learning_rate,
    "Fine-tuning: the query tower's peak learning rate (default: --finetune_learning_rate).",
    lower_bound=0)
_RETRIEVER_TOP_K = open_qa.retriever_top_k(_DEFAULTS.retriever_top_k)
_FINETUNE_READER_TOP_K = flags.DEFINE_integer(
    "finetune_reader_top_k", _DEFAULTS.finetune_reader_top_k, "Blocks the reader reads per "
    "training question (0: --k; evaluation and the export read --k).", lower_bound=0)
_READ_ANSWER_BLOCK = open_qa.read_answer_block(_DEFAULTS.read_answer_block)
_K = qa_model.k("Blocks read per question.", default=_DEFAULTS.k)
_QUESTION = qa_model.question("A question to ask at the end (repeatable; default: the first dev "
                              "questions).")
_NUM_ASKED = flags.DEFINE_integer("num_asked", _DEFAULTS.num_asked,
                                  "Dev questions asked when no --question is given.", lower_bound=0)
_PIPELINE_OPTIONS = beam_pipelines.pipeline_options("Beam options of the corpus pipelines.")
_SEED = runtime.seed(_DEFAULTS.seed)
for group in (beam_pipelines, index, lengths, model, open_qa, paths, pretraining, qa_model,
              runtime):
  flags.adopt_module_key_flags(group)  # their flags in --help


def config_from_flags() -> DemoConfig:
  return DemoConfig(
      output_dir=_OUTPUT_DIR.value, num_docs=_NUM_DOCS.value, encoder=_ENCODER.value,
      block_length=_BLOCK_LENGTH.value, query_length=_QUERY_LENGTH.value,
      dev_percent=_DEV_PERCENT.value, eval_questions=_EVAL_QUESTIONS.value,
      ict_steps=_ICT_STEPS.value, ict_batch_size=_ICT_BATCH.value,
      ict_learning_rate=_ICT_LR.value, mlm_warmup_steps=_MLM_WARMUP_STEPS.value,
      pretrain_steps=_PRETRAIN_STEPS.value,
      pretrain_batch_size=_PRETRAIN_BATCH.value, pretrain_learning_rate=_PRETRAIN_LR.value,
      num_candidates=_NUM_CANDIDATES.value, refresh_every=_REFRESH_EVERY.value,
      finetune_steps=_FINETUNE_STEPS.value, finetune_batch_size=_FINETUNE_BATCH.value,
      finetune_learning_rate=_FINETUNE_LR.value,
      finetune_retriever_learning_rate=_FINETUNE_RETRIEVER_LR.value,
      retriever_top_k=_RETRIEVER_TOP_K.value,
      finetune_reader_top_k=_FINETUNE_READER_TOP_K.value,
      read_answer_block=_READ_ANSWER_BLOCK.value, k=_K.value,
      questions=tuple(_QUESTION.value), num_asked=_NUM_ASKED.value,
      pipeline_options=_PIPELINE_OPTIONS.value, seed=_SEED.value)


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.data import shards
  from realm_tf.demo import report
  from realm_tf.demo import stages
  shards.check_output_directory(_OUTPUT_DIR.value, "--output_dir")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.ERROR)
  result = stages.run_demo(config_from_flags(), overwrite=_OVERWRITE.value)
  print("\n" + report.format_summary(result))


def run():
  cli.run("realm-demo", main)


if __name__ == "__main__":
  run()
