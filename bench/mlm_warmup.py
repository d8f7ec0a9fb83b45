"""The MLM-head warm-up (`realm_tf.training.mlm_warmup`) of a MiniLM reader on real blocks.

  python bench/mlm_warmup.py --corpus=bench/results/real_data/cache/corpus/blocks --steps=300

A new reader with all-MiniLM-L6-v2's weights (no MLM head), warmed up on the corpus blocks;
prints the machine (CPU kind, bfloat16 units, matmul peaks) and, per variant (head only;
head, encoder and word embeddings), the steps, seconds (held-out evaluations included),
seconds per step and the held-out MLM accuracy before and after (every `--eval_every` steps
in the JSON). Writes bench/results/mlm_warmup.{md,json}.
"""
import os
import sys
import tempfile
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import presets  # pylint: disable=g-import-not-at-top
from realm_tf import pretrained  # pylint: disable=g-import-not-at-top
from realm_tf.retrieval.corpus import Corpus  # pylint: disable=g-import-not-at-top
from realm_tf.training.mlm_warmup import MlmWarmup  # pylint: disable=g-import-not-at-top

_CORPUS = flags.DEFINE_string("corpus", "bench/results/real_data/cache/corpus/blocks",
                              "Blocks (bench/real_data.py's cached corpus).")
_STEPS = flags.DEFINE_integer("steps", 300, "Warm-up steps per variant.")
_BATCH = flags.DEFINE_integer("batch_size", 16, "Blocks per step.")
_BLOCK_LENGTH = flags.DEFINE_integer("block_length", 128, "Packed block length.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate (head only).")
_ENCODER_LEARNING_RATE = flags.DEFINE_float("encoder_learning_rate", 1e-4,
                                            "Peak learning rate of the 'encoder' variant.")
_HELD_OUT = flags.DEFINE_integer("held_out_blocks", 256, "Blocks never trained on.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 50, "Steps between held-out evaluations.")
_VARIANTS = flags.DEFINE_list("variants", ["head", "encoder"],
                              "'head': the MLM head alone; 'encoder': the encoder too.")


def main(argv):
  del argv
  print(bench_utils.machine_line())
  kind = bench_utils.cpu_kind()
  store = Corpus.load(_CORPUS.value)
  tokenizer = pretrained.minilm_tokenizer()
  rows = []
  for variant in _VARIANTS.value:
    rate = _ENCODER_LEARNING_RATE.value if variant == "encoder" else _LEARNING_RATE.value
    reader = presets.build_reader(presets.encoder_config(presets.DEFAULT_ENCODER,
                                                         tokenizer.vocab_size), "minilm")
    with tempfile.TemporaryDirectory() as model_dir:
      warmup = MlmWarmup(reader, store, tokenizer, model_dir, _STEPS.value, _BATCH.value, rate,
                         _BLOCK_LENGTH.value,
                         held_out_blocks=_HELD_OUT.value,
                         train_encoder=variant == "encoder",
                         eval_every=_EVAL_EVERY.value, checkpoint_every=_STEPS.value)
      started = time.perf_counter()
      accuracy = warmup.train(verbose=False)
      seconds = time.perf_counter() - started
      step_times = [r["step_time_s"] for r in warmup.loop.history[1:]]
      curve = {int(e["step"]): round(e["held_out_mlm_accuracy"], 4)
               for e in warmup.loop.evaluations()}
    rows.append({"variant": variant, "blocks": len(store),
                 "held_out_blocks": len(warmup.held_out_rows), "steps": _STEPS.value,
                 "batch_size": _BATCH.value, "block_length": _BLOCK_LENGTH.value,
                 "learning_rate": rate, "seconds": seconds,
                 "s_per_step": sum(step_times) / max(len(step_times), 1),
                 "accuracy_before": accuracy["start"], "accuracy_after": accuracy["end"],
                 "curve": curve})
    print(rows[-1], flush=True)
  columns = ["variant", "steps", "batch_size", "block_length", "learning_rate", "seconds",
             "s_per_step", "accuracy_before", "accuracy_after"]
  markdown = (f"CPU: {kind['cpu_model']}, {os.cpu_count()} cores; {len(store)} blocks "
              f"({rows[0]['held_out_blocks']} held out)\n\n"
              + bench_utils.markdown_table(rows, columns))
  print(markdown)
  print(bench_utils.write_results("mlm_warmup", rows, markdown))


if __name__ == "__main__":
  app.run(main)
