"""`realm-probe`: fill the [MASK]s of cloze texts with a pre-trained REALM, with each block's share.

    python -m realm_tf.probe --model_dir=runs/realm "ada lives in [MASK] ."
    python -m realm_tf.probe --model_dir=runs/realm --corpus=edited.jsonl --json "..."

--model_dir is a REALM pre-training run (retriever/, reader/, index/, experiment.json). Each
[MASK] is one wordpiece; it prints the filled text, p(y|x), the reader's p(y|∅,x) without
retrieval, and per candidate (the null document, then the top --k blocks) p(z|x), p(y|z,x) and
the retrieval utility RU(z|x). --corpus swaps in another knowledge corpus, embedded by the
model's doc tower. See `probing/probe_lib.py`.
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import qa_model
from realm_tf.flag_groups import runtime

_MODEL_DIR = paths.model_dir("REALM pre-training model directory (realm-pretrain's "
                             "--model_dir).", required=True)
_CORPUS = paths.corpus("Another knowledge corpus: blocks-*.tfrecord directory, JSONL, DPR TSV "
                       "or a released blocks.tfr (default: the run's, through its published "
                       "index).", default="")
_VOCAB_FILE = paths.vocab_file("WordPiece vocabulary (default: the run's).", default="")
_K = qa_model.k("Blocks retrieved per text (the null document comes on top).")
_COMPUTE_DTYPE = runtime.compute_dtype(
    "Precision of the retriever and the reader when probing (auto: bfloat16 matmuls with "
    "float32 scores and logits on hardware with bfloat16 matmuls, else float32).",
    default="auto")
_JSON = flags.DEFINE_bool("json", False, "Print one JSON object per text instead of a table.")
for group in (paths, qa_model, runtime):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  texts = argv[1:]
  if not texts:
    raise flags.ValidationError('give at least one cloze text, e.g. "ada lives in [MASK] ."')
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.probing import probe_lib
  for number, text in enumerate(texts, start=1):
    probe_lib.check_text(text, number)  # before the model loads
  prober = probe_lib.load_prober(_MODEL_DIR.value, _CORPUS.value, _VOCAB_FILE.value, _K.value,
                                 _COMPUTE_DTYPE.value)
  separator = "\n" if _JSON.value else "\n\n"
  print(separator.join(probe_lib.probe_texts(prober, texts, _JSON.value)), flush=True)


def run():
  cli.run("realm-probe", main)


if __name__ == "__main__":
  run()
