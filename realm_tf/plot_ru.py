"""`realm-plot-ru`: retrieval utility vs pre-training step as a PNG (REALM Figure 4).

  realm-plot-ru --run=salient:runs/realm/metrics.jsonl --run=random:runs/rand/metrics.jsonl \\
      --output=ru.png
"""
from absl import flags

from realm_tf import cli


_RUNS = flags.DEFINE_multi_string("run", [], "label:path/to/metrics.jsonl (repeat).")
_OUTPUT = flags.DEFINE_string("output", "retrieval_utility.png", "PNG to write.")
_SMOOTHING = flags.DEFINE_integer("smoothing", 1, "Moving-average window in steps.", lower_bound=1)


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.training import plots
  runs = {}
  for spec in _RUNS.value:
    label, sep, path = spec.partition(":")
    if not sep:
      raise flags.ValidationError(f"--run must be label:path, got {spec!r}")
    runs[label] = path
  if not runs:
    raise flags.ValidationError("give at least one --run=label:path")
  print(plots.plot_retrieval_utility(runs, _OUTPUT.value, _SMOOTHING.value))


def run():
  cli.run("realm-plot-ru", main)


if __name__ == "__main__":
  run()
