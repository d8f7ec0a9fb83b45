"""`realm-ask`: ask a fine-tuned REALM questions; answers come with their evidence blocks.

    python -m realm_tf.ask --model_dir=/tmp/qa/model "who wrote hamlet?"
    python -m realm_tf.ask --model_dir=/tmp/qa/model "who wrote hamlet?" "where is elsinore?"
    python -m realm_tf.ask --model_dir=/tmp/qa/model --corpus=new_corpus.jsonl "..."
    python -m realm_tf.ask --model_dir=/tmp/qa/model          # interactive

Each positional argument is one question, so quote a question of several words (unquoted,
`who wrote hamlet` is three questions). `--question` adds questions, asked first; with no
question at all, questions are read from stdin, one a line, until EOF or "quit".

--model_dir defaults to $REALM_TF_QA_MODEL. --corpus swaps in another knowledge corpus,
embedded with the model's doc embedder, without retraining. See `qa/ask_lib.py`.
"""
import sys

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import qa_model
from realm_tf.flag_groups import runtime

_MODEL = qa_model.define_qa_model_flags()
_K = qa_model.k("Evidence blocks read per question.")
_QUESTION = qa_model.question("A question (repeatable), asked before the positional arguments, "
                              "each of which is one question too.")
for group in (cli, index, paths, qa_model, runtime):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.mips.index_builder import ScannSettings
  from realm_tf.mips.index_builder import Sharding
  from realm_tf.qa import ask_lib
  from realm_tf.qa.released_imports import ReleasedSettings
  questions = ask_lib.command_line_questions(_QUESTION.value, argv[1:])
  asker = ask_lib.get_asker(_MODEL.model_dir.value, _MODEL.corpus.value,
                            _MODEL.embeddings_dir.value, _K.value, _MODEL.index_kind.value,
                            ScannSettings(**_MODEL.index.scann_values()),
                            Sharding(**_MODEL.index.sharding_values()),
                            _MODEL.embedding_dtype.value,
                            ReleasedSettings(**_MODEL.released.values()),
                            _MODEL.compute_dtype.value)
  ask_lib.answer_or_interact(asker, questions, sys.stdin,
                             lambda text: print(text, end="", flush=True))


def run():
  cli.run("realm-ask", main)


if __name__ == "__main__":
  run()
