"""GPU memory growth and placement (`realm_tf.devices`), by construction: a fake `tf.config`
stands in for GPUs this machine does not have."""
import subprocess
import sys
import types

import pytest

from realm_tf import devices
from realm_tf import errors


class FakeConfig:
  """`tf.config`'s GPU calls, recorded."""

  def __init__(self, num_gpus: int, started: bool = False):
    self.gpus = [types.SimpleNamespace(name=f"/physical_device:GPU:{i}")
                 for i in range(num_gpus)]
    self.visible, self.growth, self.started = None, [], started
    self.experimental = types.SimpleNamespace(set_memory_growth=self._grow)

  def list_physical_devices(self, kind):
    assert kind == "GPU"
    return list(self.gpus)

  def set_visible_devices(self, chosen, kind):
    assert kind == "GPU"
    if self.started:
      raise RuntimeError("Visible devices cannot be modified after being initialized")
    self.visible = [gpu.name for gpu in chosen]

  def _grow(self, gpu, enable):
    self.growth.append((gpu.name, enable))


@pytest.mark.parametrize("device,visible,grown", [
    ("", None, [0, 1]),  # every GPU, each grown as needed
    ("cpu", [], []),
    ("gpu:1", [1], [1])])
def test_use_gpus_places_the_process_and_grows_its_memory(device, visible, grown):
  config = FakeConfig(2)
  names = devices.use_gpus(device, config)
  name = lambda i: f"/physical_device:GPU:{i}"
  assert config.visible == (None if visible is None else [name(i) for i in visible])
  assert config.growth == [(name(i), True) for i in grown]
  assert names == [name(i) for i in grown]


def test_a_missing_gpu_or_a_malformed_device_is_refused():
  with pytest.raises(errors.InputError, match=r"--device=gpu:2: this host has 2 GPUs"):
    devices.use_gpus("gpu:2", FakeConfig(2))
  for bad in ("GPU", "gpu:", "gpu:x", "tpu:0"):
    assert not devices.valid_device(bad)
    with pytest.raises(ValueError):
      devices.check_device(bad)


def test_gpus_started_already_leave_the_settings_unapplied_not_a_crash():
  assert devices.use_gpus("gpu:0", FakeConfig(1, started=True)) == ["/physical_device:GPU:0"]


def test_every_binary_grows_gpu_memory_unless_the_user_decided():
  environ = {}
  devices.grow_gpu_memory(environ)
  assert environ == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
  environ = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}
  devices.grow_gpu_memory(environ)
  assert environ == {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}


def test_the_runner_sets_growth_before_main_so_the_builder_it_starts_inherits_it():
  code = ("import os, sys; from realm_tf import cli\n"
          "def main(argv): print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))\n"
          "sys.argv = ['x']; cli.run('x', main)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, env={"PATH": "/usr/bin:/bin"})
  assert out.stdout.strip() == "true"
