"""`realm-ask`: ask a fine-tuned REALM questions; answers come with their evidence blocks.

    python -m realm_tf.ask --model_dir=/tmp/qa/model "who wrote hamlet?"
    python -m realm_tf.ask --model_dir=/tmp/qa/model --corpus=new_corpus.jsonl "..."
    python -m realm_tf.ask --model_dir=/tmp/qa/model          # interactive

--model_dir defaults to $REALM_TF_QA_MODEL. --corpus swaps in another knowledge corpus,
embedded with the model's doc embedder, without retraining. See `qa/ask_lib.py`.
"""
import sys

from absl import flags

from realm_tf import cli

_MODEL = cli.define_model_flags()
flags.adopt_module_key_flags(cli)
_K = flags.DEFINE_integer("k", 5, "Evidence blocks read per question.", lower_bound=1)
_QUESTION = flags.DEFINE_multi_string("question", [], "A question (repeatable); positional "
                                      "arguments are questions too.")


def main(argv):
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.mips.index_builder import ScannSettings
  from realm_tf.qa import ask_lib
  questions = list(_QUESTION.value) + ([" ".join(argv[1:])] if len(argv) > 1 else [])
  asker = ask_lib.get_asker(_MODEL.model_dir.value, _MODEL.corpus.value,
                            _MODEL.embeddings_dir.value, _K.value, _MODEL.index_kind.value,
                            ScannSettings(**_MODEL.scann.values()),
                            _MODEL.embedding_dtype.value)
  ask_lib.answer_or_interact(asker, questions, sys.stdin,
                             lambda text: print(text, end="", flush=True))


def run():
  cli.run("realm-ask", main)


if __name__ == "__main__":
  run()
