"""tf.distribute strategies, flag-selected, and host <-> replica helpers.

Everything a TPU cannot do (MIPS search, gathering and packing block wordpieces) runs on the
host between two replicated steps: `strategy.run` embeds the queries, `local_batch` brings the
embeddings to the host, the host searches the index and packs candidate features, and
`distribute_batch` splits them over the replicas for the replicated training step.
"""
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
  """Splits this worker's [B, ...] host batch into equal per-replica slices.

  Raises:
    ValueError: B is not a multiple of the number of local replicas.
  """
  n = local_replicas(strategy)
  size = int(tf.nest.flatten(batch)[0].shape[0])
  if size % n:
    raise ValueError(f"batch of {size} does not split over {n} replicas")
  per_replica = size // n

  def value_fn(context):
    i = context.replica_id_in_sync_group % n
    return tf.nest.map_structure(lambda t: t[i * per_replica:(i + 1) * per_replica], batch)

  return strategy.experimental_distribute_values_from_function(value_fn)


def local_batch(strategy, per_replica) -> tf.Tensor:
  """Concatenates this worker's per-replica results back into its [B, ...] host batch."""
  return tf.concat(strategy.experimental_local_results(per_replica), axis=0)
