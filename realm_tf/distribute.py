"""tf.distribute strategies, chosen by flag, and the host <-> replica helpers.

What a TPU cannot do (MIPS search, gathering and packing block wordpieces) runs on the host
between two replicated steps: `strategy.run` embeds the queries, `global_batch` brings them to
the host, which searches and packs, and `distribute_batch` splits the features over replicas.

Several workers (`MultiWorkerMirroredStrategy`, one process per host, `TF_CONFIG`) all read the
same global batch and do the same host work; replica r of R takes rows [r·B/R, (r+1)·B/R), so a
step is the single-worker step. Only the chief (`is_chief`) keeps what it writes; the others
write the same files into a scratch `output_dir`, since saving may run collectives every worker
must join. A lost worker fails the survivors' next collective within seconds, which
`reporting_lost_workers` turns into a `WorkerLostError` saying how to resume.
"""
import atexit
import contextlib
import re
import shutil
import tempfile
from typing import Dict, Optional

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")


def split_cpu(num_devices: int) -> None:
  """Splits the CPU into `num_devices` logical devices (to run MirroredStrategy on one host
  without accelerators); must run before TensorFlow initialises its devices."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])


def build_strategy(name: str = "default", tpu_address: Optional[str] = None):
  """Returns the named `tf.distribute` strategy (mirrored over all local GPUs, or over the
  logical CPUs made by `split_cpu` when there is no GPU)."""
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "mirrored":
    devices = None
    if not tf.config.list_logical_devices("GPU"):
      devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)
  if name == "multi_worker_mirrored":
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"Unknown strategy {name!r}; expected one of {STRATEGIES}")


def local_replicas(strategy) -> int:
  """Replicas on this worker (1 for the default strategy)."""
  if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
    return 1
  return len(strategy.extended.worker_devices)


def distribute_batch(strategy, batch: Dict[str, tf.Tensor]):
  """Splits the [B, ...] global host batch (the same on every worker) into equal
  per-replica slices; this worker's replicas take theirs.

  Raises:
    ValueError: B is not a multiple of the number of replicas.
  """
  n = strategy.num_replicas_in_sync
  size = int(tf.nest.flatten(batch)[0].shape[0])
  if size % n:
    raise ValueError(f"batch of {size} does not split over {n} replicas")
  per_replica = size // n

  def value_fn(context):
    i = context.replica_id_in_sync_group
    return tf.nest.map_structure(lambda t: t[i * per_replica:(i + 1) * per_replica], batch)

  return strategy.experimental_distribute_values_from_function(value_fn)


def global_batch(strategy, per_replica) -> tf.Tensor:
  """Concatenates the per-replica results of every worker into the [B, ...] global batch, on
  every worker."""
  if num_workers(strategy) == 1:
    return tf.concat(strategy.experimental_local_results(per_replica), axis=0)
  return strategy.gather(per_replica, axis=0)


def num_workers(strategy) -> int:
  """Worker processes of the job (1 unless MultiWorkerMirroredStrategy has several)."""
  return strategy.num_replicas_in_sync // local_replicas(strategy)


def is_chief(strategy) -> bool:
  """Whether this worker writes the run's outputs: always with one worker; under
  MultiWorkerMirroredStrategy the "chief" task, or worker 0 when there is none."""
  return bool(strategy.extended.should_checkpoint)


def output_dir(strategy, path: str) -> str:
  """`path` on the chief; on another worker a fresh local scratch directory for the same
  files, deleted when the process exits."""
  if is_chief(strategy):
    return path
  scratch = tempfile.mkdtemp(prefix="realm-tf-worker-")
  atexit.register(shutil.rmtree, scratch, ignore_errors=True)
  return scratch


def chief_value(strategy, value: int) -> int:
  """The chief's `value` on every worker (the others' `value` is ignored); with several workers
  an all-reduce, so also a barrier: each worker waits until the chief contributes."""
  if num_workers(strategy) == 1:
    return value
  per_replica = strategy.experimental_distribute_values_from_function(
      lambda context: tf.constant(value if context.replica_id_in_sync_group == 0 else 0,
                                  tf.int64))
  return int(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))


def barrier(strategy) -> None:
  """Returns when every worker has called it (nothing to wait for with one worker)."""
  chief_value(strategy, 0)


class WorkerLostError(RuntimeError):
  """A worker of a multi-worker job stopped: the job cannot go on without it."""


_LOST_WORKER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                       tf.errors.AbortedError, tf.errors.CancelledError)


@contextlib.contextmanager
def reporting_lost_workers(strategy, model_dir: str, step: tf.Variable):
  """Turns the collective-op failure that a dead worker causes on the survivors into a
  `WorkerLostError` naming the fix (one worker: errors pass through unchanged)."""
  try:
    yield
  except _LOST_WORKER_ERRORS as e:
    if num_workers(strategy) == 1:
      raise
    lines = [line.strip() for line in re.sub(r"\{\{[^}]*\}\}", "", str(e)).splitlines()]
    lines = [line for line in lines if line] or [type(e).__name__]
    detail = next((line for line in lines if "aborted by" in line or "heartbeat" in line),
                  lines[0])
    raise WorkerLostError(
        f"a worker of this {num_workers(strategy)}-worker job stopped during step "
        f"{int(step.numpy()) + 1} ({detail}); the job cannot go on without it. Restart every "
        f"worker with the same flags: each resumes from the last checkpoint in {model_dir}"
    ) from e
