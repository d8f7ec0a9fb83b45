"""`realm-demo`: the main job on the embedded default (see `demo_lib`)."""
from absl import app
from absl import flags

from realm_tf import demo_lib

_OUTPUT_DIR = flags.DEFINE_string("output_dir", "results/demo", "Where the index is written.")
_NUM_DOCS = flags.DEFINE_integer("num_docs", 2000, "Articles to index (0: all 10,033).")
_K = flags.DEFINE_integer("k", 5, "Blocks retrieved and read per question.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "Embedding batch size.")
_QUESTIONS = flags.DEFINE_multi_string("question", list(demo_lib.DEFAULT_QUESTIONS),
                                       "Questions to answer (repeat the flag).")


def main(argv):
  del argv
  report = demo_lib.run_demo(_OUTPUT_DIR.value, num_docs=_NUM_DOCS.value,
                             questions=_QUESTIONS.value, k=_K.value,
                             batch_size=_BATCH_SIZE.value)
  print(demo_lib.format_report(report))


def run():
  app.run(main)


if __name__ == "__main__":
  run()
