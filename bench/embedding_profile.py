"""Where the doc embedder's time goes: a TF profiler trace of one forward, by op type.

  python bench/embedding_profile.py --encoder=bert_base --batch_size=8 --length=288

Traces `--steps` forwards of the doc tower at a fixed length (random token ids: time does not
depend on them), reads the host trace (`*.xplane.pb`) and sums the time of every TensorFlow
op by type. The matmul ops (Einsum, MatMul, BatchMatMulV2) are set against the model's
matmul FLOPs, which shows how much of the gap to the machine's matmul peak (measured in the
same run) is slow matmuls and how much is time spent outside them (softmax, LayerNorm, GELU,
bias adds, reshapes). Writes bench/results/embedding_profile_<encoder>_<variant>.{md,json}.
`--dtype=bfloat16` profiles the bfloat16 copy of the tower against the bfloat16 peak.
"""
import collections
import glob
import os
import sys
import tempfile
import time

import tensorflow as tf
from absl import app
from absl import flags
from tensorflow.tsl.profiler.protobuf import xplane_pb2

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from bench.embedding_bench import encoder_flops  # pylint: disable=g-import-not-at-top
from realm_tf import configs  # pylint: disable=g-import-not-at-top
from realm_tf.models.precision import COMPUTE_DTYPES  # pylint: disable=g-import-not-at-top
from realm_tf.models.precision import with_compute_dtype  # pylint: disable=g-import-not-at-top

_ENCODER = flags.DEFINE_enum("encoder", "bert_base", ["bert_base", "minilm_l6"], "Doc tower.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Blocks per forward.")
_LENGTH = flags.DEFINE_integer("length", 288, "Wordpieces per block (fixed).")
_STEPS = flags.DEFINE_integer("steps", 3, "Forwards traced.")
_XLA = flags.DEFINE_bool("xla", False, "jit_compile the forward (ops are then XLA clusters).")
_DTYPE = flags.DEFINE_enum("dtype", "float32", list(COMPUTE_DTYPES), "Compute precision.")

MATMUL_TYPES = ("Einsum", "MatMul", "BatchMatMulV2", "_MklMatMul", "_FusedMatMul",
                "_MklFusedMatMul", "_MklBatchMatMulV2", "_MklEinsum")


def op_times(trace_dir: str) -> collections.Counter:
  """Seconds per TF op type summed over the host threads of the newest trace in `trace_dir`."""
  (path,) = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))[-1:]
  space = xplane_pb2.XSpace()
  with open(path, "rb") as f:
    space.ParseFromString(f.read())
  times = collections.Counter()
  for plane in space.planes:
    if plane.name != "/host:CPU":
      continue
    for line in plane.lines:
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        # TF ops are "<node name>:<op type>"; runtime spans are "Class::Method" or have spaces.
        if ":" not in name or "::" in name or " " in name:
          continue
        times[name.rsplit(":", 1)[1]] += event.duration_ps * 1e-12
  return times


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  peak = bench_utils.matmul_peak_flops(dtype=_DTYPE.value)
  config = getattr(configs.EncoderConfig, _ENCODER.value)()
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=config))
  retriever.build()
  retriever = with_compute_dtype(retriever, _DTYPE.value)
  shape = [_BATCH_SIZE.value, _LENGTH.value]
  features = {"input_word_ids": tf.random.uniform(shape, 999, 20000, dtype=tf.int32),
              "input_mask": tf.ones(shape, tf.int32), "input_type_ids": tf.zeros(shape, tf.int32)}
  embed = tf.function(lambda f: retriever.embed_documents(f, training=False),
                      jit_compile=_XLA.value)
  seconds = bench_utils.best_time(lambda: embed(features).numpy(), repeats=3, warmup=2)
  trace_dir = tempfile.mkdtemp(prefix="embedding_profile_")
  tf.profiler.experimental.start(trace_dir)
  start = time.perf_counter()
  for _ in range(_STEPS.value):
    embed(features).numpy()
  traced_seconds = (time.perf_counter() - start) / _STEPS.value
  tf.profiler.experimental.stop()
  times = op_times(trace_dir)
  flops = encoder_flops(config, _LENGTH.value) * _BATCH_SIZE.value  # all of it matmul
  total_op = sum(times.values()) / _STEPS.value
  matmul = sum(t for op, t in times.items() if op in MATMUL_TYPES) / _STEPS.value
  rows = [{"op type": op, "ms per forward": 1e3 * t / _STEPS.value,
           "share of op time": t / _STEPS.value / total_op}
          for op, t in times.most_common(12)]
  summary = {
      "encoder": _ENCODER.value, "xla": _XLA.value, "dtype": _DTYPE.value,
      "batch": _BATCH_SIZE.value,
      "length": _LENGTH.value, "matmul_peak_gflops": peak / 1e9,
      "forward_s": seconds, "traced_forward_s": traced_seconds,
      "utilisation": flops / seconds / peak,
      "op_time_per_forward_s": total_op, "matmul_time_per_forward_s": matmul,
      # Op time is summed over threads: with intra-op parallelism it can exceed wall time.
      "matmul_share_of_op_time": matmul / total_op if total_op else 0.0,
      "matmul_kernel_gflops": flops / matmul / 1e9 if matmul else 0.0,
  }
  variant = ("xla" if _XLA.value else "graph") + ("_bf16" if _DTYPE.value == "bfloat16" else "")
  markdown = (
      f"{_ENCODER.value}, batch {_BATCH_SIZE.value} × {_LENGTH.value} wordpieces, "
      f"{'XLA' if _XLA.value else 'TF graph'}, {_DTYPE.value}: forward {seconds * 1e3:.0f} ms "
      f"({flops / seconds / 1e9:.1f} GFLOP/s = {summary['utilisation']:.2f} of the "
      f"{peak / 1e9:.1f} GFLOP/s {_DTYPE.value} matmul peak measured in this run). Matmul ops take "
      f"{summary['matmul_share_of_op_time']:.0%} of the traced op time.\n\n" +
      bench_utils.markdown_table(rows, ["op type", "ms per forward", "share of op time"]))
  print(markdown)
  print(summary)
  print(bench_utils.write_results(f"embedding_profile_{_ENCODER.value}_{variant}",
                                  [summary] + rows, markdown))


if __name__ == "__main__":
  app.run(main)
