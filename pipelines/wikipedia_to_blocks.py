r"""Pipeline 1: Wikipedia dump (or JSONL) -> REALM blocks. See `wikipedia_to_blocks_lib`.

Local (DirectRunner):

    python -m pipelines.wikipedia_to_blocks \
      --input=enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2 \
      --output_dir=/tmp/corpus \
      --pipeline_options="--direct_num_workers=2 --direct_running_mode=multi_processing"

Full English Wikipedia on Dataflow: see docs/pipelines.md.
"""
from absl import flags

from realm_tf import cli
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.flag_groups import beam_pipelines
from realm_tf.flag_groups import lengths
from realm_tf.flag_groups import paths

_INPUT = flags.DEFINE_list("input", None, "Input file patterns (comma-separated).",
                           required=True)
_OUTPUT_DIR = paths.output_dir("Corpus directory to write.", required=True)
_INPUT_FORMAT = flags.DEFINE_enum("input_format", "wikipedia", ["wikipedia", "jsonl"],
                                  "MediaWiki XML dump (.xml/.bz2/.gz) or JSONL {title, text}.")
_VOCAB_FILE = paths.vocab_file("WordPiece vocab.txt; empty: MiniLM's uncased BERT vocab.",
                                default="")
_BLOCK_LENGTH = lengths.block_length(BLOCK_LENGTH)
_MAX_TITLE_WORDPIECES = flags.DEFINE_integer("max_title_wordpieces", 64,
                                             "Longer titles go to the dead-letter output.",
                                             lower_bound=1)
_BLOCK_BOUNDARIES = flags.DEFINE_enum(
    "block_boundaries", "greedy", ["greedy", "paragraph", "section"],
    "Where blocks also break: greedy: only between articles (REALM's corpus); paragraph: at "
    "each paragraph (a block holds one, or a piece of a long one); section: at the lead's "
    "and each level-1/2 heading's start (JSONL: at none).")
_MAX_PAGE_BYTES = flags.DEFINE_integer("max_page_bytes", 4 << 20,
                                       "Longer pages go to the dead-letter output.", lower_bound=1)
_MAX_UNPARSED_FRACTION = flags.DEFINE_float(
    "max_unparsed_fraction", 0.25,
    "Pages with more unresolvable markup than this are malformed (dead letters).",
    lower_bound=0, upper_bound=1)
_NUM_SHARDS = beam_pipelines.num_shards("Block shards; 0: the runner decides.")
_PIPELINE_OPTIONS = beam_pipelines.pipeline_options(beam_pipelines.MORE_OPTIONS_HELP)
for group in (beam_pipelines, lengths, paths):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  # pylint: disable=g-import-not-at-top  (TensorFlow and Beam after flag parsing)
  from pipelines import beam_runner
  from pipelines import wikipedia_to_blocks_lib
  config = wikipedia_to_blocks_lib.BlocksConfig(
      input_patterns=_INPUT.value, output_dir=_OUTPUT_DIR.value,
      input_format=_INPUT_FORMAT.value, vocab_file=_VOCAB_FILE.value,
      block_length=_BLOCK_LENGTH.value, max_title_wordpieces=_MAX_TITLE_WORDPIECES.value,
      block_boundaries=_BLOCK_BOUNDARIES.value,
      max_page_bytes=_MAX_PAGE_BYTES.value,
      max_unparsed_fraction=_MAX_UNPARSED_FRACTION.value, num_shards=_NUM_SHARDS.value)
  beam_runner.run_and_print(wikipedia_to_blocks_lib.run_pipeline, config,
                            _PIPELINE_OPTIONS.value, argv[1:])


def run():
  cli.run("pipelines.wikipedia_to_blocks", main, beam_pipeline=True)


if __name__ == "__main__":
  run()
