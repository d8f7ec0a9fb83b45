r"""Pipeline 2: blocks -> pre-training examples. See `pretraining_examples_lib`.

Local (DirectRunner):

    python -m pipelines.pretraining_examples --corpus=/tmp/corpus \
      --output_dir=/tmp/examples \
      --pipeline_options="--direct_num_workers=2 --direct_running_mode=multi_processing"

`--masking=random_span|random_token|spanbert` writes the ablations' examples; `--tagger=dates`
tags dates only, `--tagger=my.module:make_tagger` plugs in any tagger (e.g. a BERT CoNLL
tagger).
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import beam_pipelines
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import pretraining

_CORPUS_DIR = paths.corpus("Block shards of pipeline 1, a corpus directory, JSONL, DPR TSV or "
                           "a released blocks.tfr.", required=True, alias=True)
_OUTPUT_DIR = paths.output_dir("Where the example shards go.", required=True)
_MASKING = pretraining.masking("salient_span")
_TAGGER = flags.DEFINE_string("tagger", "spacy",
                              "'spacy', 'spacy:<model>', 'dates' or '<module>:<factory>'.")
_VOCAB_FILE = paths.vocab_file("WordPiece vocab.txt of the corpus; empty: MiniLM's.",
                                default="")
_MAX_QUERY_WORDPIECES = flags.DEFINE_integer("max_query_wordpieces", 94,
                                             "query_ids kept per sentence.", lower_bound=1)
_MIN_SENTENCE_WORDPIECES = flags.DEFINE_integer("min_sentence_wordpieces", 5,
                                                "Shorter sentences make no example.", lower_bound=0)
_MAX_SPAN_WORDPIECES = flags.DEFINE_integer("max_span_wordpieces", 10,
                                            "Longer spans are skipped.", lower_bound=1)
_NUM_SHARDS = beam_pipelines.num_shards("Example shards; 0: the runner decides.")
_PIPELINE_OPTIONS = beam_pipelines.pipeline_options(beam_pipelines.MORE_OPTIONS_HELP)
for group in (beam_pipelines, paths, pretraining):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  # pylint: disable=g-import-not-at-top  (TensorFlow and Beam after flag parsing)
  from pipelines import beam_runner
  from pipelines import pretraining_examples_lib
  config = pretraining_examples_lib.ExamplesConfig(
      corpus_dir=_CORPUS_DIR.value, output_dir=_OUTPUT_DIR.value, masking=_MASKING.value,
      tagger=_TAGGER.value, vocab_file=_VOCAB_FILE.value,
      max_query_wordpieces=_MAX_QUERY_WORDPIECES.value,
      min_sentence_wordpieces=_MIN_SENTENCE_WORDPIECES.value,
      max_span_wordpieces=_MAX_SPAN_WORDPIECES.value, num_shards=_NUM_SHARDS.value)
  beam_runner.run_and_print(pretraining_examples_lib.run_pipeline, config,
                            _PIPELINE_OPTIONS.value, argv[1:])


def run():
  cli.run("pipelines.pretraining_examples", main, beam_pipeline=True)


if __name__ == "__main__":
  run()
