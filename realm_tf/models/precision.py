"""Compute precision: which dtype the matmuls run in, and bfloat16 copies of the doc tower.

`best_compute_dtype()` is the `auto` of every `--compute_dtype` / `--embedding_dtype` flag:
bfloat16 on a TPU, on GPUs of compute capability 8.0 and up (Ampere, Hopper: bfloat16 tensor
cores), or on a CPU with bfloat16 units (`amx_bf16`, `avx512_bf16`) that oneDNN may use
(`onednn_allows_bf16`: oneDNN on, `ONEDNN_MAX_CPU_ISA` unset or at AVX512_CORE_BF16 or above);
float32 elsewhere. A CPU without the units emulates bfloat16 and is slower in it; so do GPUs
below 8.0 (T4, V100), where Keras's `mixed_float16` would need loss scaling that realm_tf's
training steps do not do: float32 there (docs/decisions.md; tested by construction).

Embedding the corpus is inference only: `with_compute_dtype` gives the doc tower a copy with
float32 weights that computes under Keras's `mixed_bfloat16` policy, and callers cast its
embeddings back to float32. Training steps build their towers under `policy_scope` (the
variables, scores and losses stay float32).
"""
import contextlib
import os
import platform
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import tensorflow as tf

from realm_tf.keras import keras
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever

# The flag vocabulary: "auto" is `best_compute_dtype()`.
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
# /proc/cpuinfo flags of CPU bfloat16 matmul units.
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# `ONEDNN_MAX_CPU_ISA` values that still allow oneDNN's bfloat16 matmul kernels (the others,
# SSE41 to AVX512_CORE_VNNI, cap it below them; ALL and DEFAULT cap nothing).
BF16_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX",
             "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "ALL", "DEFAULT")


def _cpuinfo_value(key: str, cpuinfo_path: str) -> Optional[str]:
  """The first value of `key` in /proc/cpuinfo (None where there is no file or no such key)."""
  if not os.path.exists(cpuinfo_path):
    return None
  with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
    for line in f:
      name, _, value = line.partition(":")
      if name.strip() == key:
        return value.strip()
  return None


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> frozenset:
  """The CPU feature flags of /proc/cpuinfo (empty where there is no such file)."""
  return frozenset((_cpuinfo_value("flags", cpuinfo_path) or "").split())


# `ONEDNN_MAX_CPU_ISA` values below AVX-512: oneDNN has no bfloat16 kernel at all there.
BELOW_AVX512_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")


def _onednn_on(environ: Mapping[str, str]) -> bool:
  return environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def _isa_limit(environ: Mapping[str, str]) -> str:
  return (environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA") or
          "ALL").strip().upper()


def bf16_matmuls_crash(flags: Optional[Iterable[str]] = None,
                       environ: Optional[Mapping[str, str]] = None) -> bool:
  """Whether a bfloat16 matmul would crash this process: TensorFlow sends bfloat16 matmuls to
  oneDNN where the CPU flags AVX-512, and oneDNN capped below AVX-512 (`ONEDNN_MAX_CPU_ISA=AVX2`
  on such a CPU, the stand-in for an AVX2 one) has no kernel for them: a segmentation fault. A
  real AVX2 CPU computes them through Eigen."""
  environ = os.environ if environ is None else environ
  flags = cpu_flags() if flags is None else set(flags)
  return _onednn_on(environ) and "avx512f" in flags and _isa_limit(environ) in BELOW_AVX512_ISAS


def onednn_allows_bf16(environ: Optional[Mapping[str, str]] = None) -> bool:
  """Whether oneDNN, as `environ` (default `os.environ`) configures it, may run bfloat16
  matmul kernels: it is on (`TF_ENABLE_ONEDNN_OPTS` not 0/false) and `ONEDNN_MAX_CPU_ISA`
  (also read as `DNNL_MAX_CPU_ISA`) is unset or one of `BF16_ISAS`."""
  environ = os.environ if environ is None else environ
  return _onednn_on(environ) and _isa_limit(environ) in BF16_ISAS


def cpu_model(cpuinfo_path: str = "/proc/cpuinfo") -> str:
  """The CPU's model name from /proc/cpuinfo (the platform's machine name where there is none)."""
  return (_cpuinfo_value("model name", cpuinfo_path) or platform.processor() or
          platform.machine())


def machine_line() -> str:
  """One line naming the CPU kind, its bfloat16 units, oneDNN's settings and what `auto`
  resolves to here: tiny models follow other trajectories on other kinds, so a test run or a
  figure names the one it ran on."""
  units = [flag for flag in CPU_BF16_FLAGS if flag in cpu_flags()] or ["none"]
  onednn = "on" if _onednn_on(os.environ) else "off"
  return (f"CPU: {cpu_model()}, {os.cpu_count()} cores; bfloat16 units: {'/'.join(units)}; "
          f"oneDNN {onednn}, ISA limit {_isa_limit(os.environ)}; "
          f"auto precision: {best_compute_dtype()}")


# The first GPU compute capability with bfloat16 tensor cores (Ampere).
GPU_BF16_CAPABILITY = (8, 0)


def gpu_capabilities() -> List[Optional[Tuple[int, int]]]:
  """The compute capability of each GPU this process sees (None where TensorFlow reports
  none), from `tf.config.experimental.get_device_details`."""
  return [tf.config.experimental.get_device_details(gpu).get("compute_capability")
          for gpu in tf.config.get_visible_devices("GPU")]


def gpu_dtype(capabilities: Sequence[Optional[Tuple[int, int]]]) -> Optional[str]:
  """What `auto` computes in on these GPUs: "bfloat16" where every one has bfloat16 tensor
  cores (`GPU_BF16_CAPABILITY` and up), else "float32"; None without GPUs (the CPU decides)."""
  if not capabilities:
    return None
  fast = all(c is not None and tuple(c) >= GPU_BF16_CAPABILITY for c in capabilities)
  return "bfloat16" if fast else "float32"


def best_compute_dtype(flags: Optional[Iterable[str]] = None,
                       device_types: Optional[Iterable[str]] = None,
                       environ: Optional[Mapping[str, str]] = None,
                       gpus: Optional[Sequence[Optional[Tuple[int, int]]]] = None) -> str:
  """"bfloat16" where matmuls have bfloat16 units (a TPU among `device_types`, GPUs that
  `gpu_dtype` finds them on, else a CPU with one of `CPU_BF16_FLAGS` in `flags` that oneDNN
  may use, `onednn_allows_bf16`), else "float32".

  Args:
    flags: CPU feature flags (default: this machine's, `cpu_flags()`).
    device_types: TF physical device types (default: this machine's, e.g. ["CPU", "TPU"]).
    environ: the environment oneDNN reads (default `os.environ`).
    gpus: the compute capability of each visible GPU (default: `gpu_capabilities()`).
  """
  if device_types is None:
    device_types = [d.device_type for d in tf.config.list_physical_devices()]
  if "TPU" in set(device_types):
    return "bfloat16"
  on_gpus = gpu_dtype(gpu_capabilities() if gpus is None else gpus)
  if on_gpus:
    return on_gpus
  flags = cpu_flags() if flags is None else set(flags)
  units = bool(set(CPU_BF16_FLAGS) & set(flags))
  return "bfloat16" if units and onednn_allows_bf16(environ) else "float32"


def resolve(compute_dtype: str) -> str:
  """`compute_dtype` ("auto", "float32" or "bfloat16") as "float32" or "bfloat16"."""
  if compute_dtype not in COMPUTE_DTYPES:
    raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {compute_dtype!r}")
  if compute_dtype == "bfloat16" and bf16_matmuls_crash():
    raise ValueError(
        f"compute_dtype=bfloat16: ONEDNN_MAX_CPU_ISA={_isa_limit(os.environ)} on a CPU with "
        "AVX-512 leaves oneDNN without bfloat16 kernels, and TensorFlow would crash in them. "
        "Pass float32 or auto, or unset ONEDNN_MAX_CPU_ISA")
  return best_compute_dtype() if compute_dtype == "auto" else compute_dtype


@contextlib.contextmanager
def policy_scope(compute_dtype: str) -> Iterator[str]:
  """Models built inside compute in `resolve(compute_dtype)` (Keras `mixed_bfloat16` for
  bfloat16: float32 variables, bfloat16 matmuls); yields the resolved dtype. The global policy
  is restored on exit, so build (not only construct) the models inside."""
  dtype = resolve(compute_dtype)
  previous = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
  try:
    yield dtype
  finally:
    keras.mixed_precision.set_global_policy(previous)


def with_compute_dtype(model: Union[Retriever, Reader], compute_dtype: str
                       ) -> Union[Retriever, Reader]:
  """`model` (a retriever or a reader) itself where `compute_dtype` resolves to its encoders'
  compute dtype; otherwise a copy with the same (float32) weights that computes in that dtype.
  The copy does not follow later training updates."""
  dtype = resolve(compute_dtype)
  encoder = model.doc_encoder if isinstance(model, Retriever) else model.encoder
  if dtype == encoder.compute_dtype:
    return model
  with policy_scope(dtype):
    copy = type(model).from_config(model.get_config())
    copy.build()
  copy.set_weights(model.get_weights())
  return copy
