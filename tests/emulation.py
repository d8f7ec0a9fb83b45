"""Test marks for CPU-kind emulation (`tools/cpu_kinds.py`: oneDNN capped by ONEDNN_MAX_CPU_ISA).

`bf16_compute` marks a test that computes in bfloat16 (not `auto`): it is skipped where
oneDNN, capped below AVX-512 on an AVX-512 CPU to stand in for an AVX2 one, would crash in a
bfloat16 matmul (`models.precision.bf16_matmuls_crash`); a real AVX2 CPU runs it.
"""
import pytest

from realm_tf.models import precision

bf16_compute = pytest.mark.skipif(
    precision.bf16_matmuls_crash(),
    reason="bfloat16 matmuls crash oneDNN capped below AVX-512 (ONEDNN_MAX_CPU_ISA); a real "
    "AVX2 CPU runs them through Eigen")
