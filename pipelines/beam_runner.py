"""Running a Beam pipeline from absl flags, and reading its counters back.

Every binary of `pipelines/` takes its own absl flags; the flags it does not know are Beam's
(runner, project, workers, ...), as are those of `--pipeline_options`, passed through:

    --runner=DataflowRunner --project=P --region=R --temp_location=gs://... --setup_file=./setup.py
    --pipeline_options="--direct_num_workers=2 --direct_running_mode=multi_processing"
    --runner=DaskRunner --dask_client_address=tcp://SCHEDULER:8786

No `--runner`, or `--runner=DirectRunner`, is `LocalRunner` (Beam's FnApiRunner, which
DirectRunner picks for batch pipelines): Beam 2.77's DirectRunner first tries PrismRunner, which
downloads a binary from GitHub, a network call in an offline tool. `--runner=DaskRunner` is
`pipelines.dask_runner.DaskRunner`. Counters share `COUNTER_NAMESPACE`; `run` returns {} on a
runner that collects none (Dask), and the pipelines then count their outputs.
"""
import importlib
import shlex
from typing import Any, Callable, Dict, Optional, Sequence

from absl import logging
import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners import runner as beam_runner_base
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle

from realm_tf import errors

COUNTER_NAMESPACE = "realm_tf.pipelines"
LOCAL_RUNNER = "pipelines.beam_runner.LocalRunner"
# --runner names this module resolves to a class of its own.
RUNNERS = {"DirectRunner": LOCAL_RUNNER, "DaskRunner": "pipelines.dask_runner.DaskRunner"}


class LocalRunner(beam_runner_base.PipelineRunner):
  """Beam's FnApiRunner in this process (or `--direct_num_workers` processes), set up as
  DirectRunner sets it up, without DirectRunner's PrismRunner attempt (a download)."""

  def run_pipeline(self, pipeline, options):
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision_info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(provision_info=provision_info).run_pipeline(pipeline, options)


def counter(name: str):
  """A Beam counter of the pipelines' namespace."""
  return beam.metrics.Metrics.counter(COUNTER_NAMESPACE, name)


def pipeline_options(passthrough: Optional[str] = None,
                     beam_args: Sequence[str] = ()) -> PipelineOptions:
  """Beam options from `beam_args` (a binary's flags absl did not know) and a
  `--pipeline_options` string (shell-quoted flags); default runner: `LocalRunner`, and
  `--runner` names of `RUNNERS` are resolved to their classes."""
  flags = list(beam_args) + shlex.split(passthrough or "")
  options = PipelineOptions(flags)
  standard = options.view_as(StandardOptions)
  standard.runner = RUNNERS.get(standard.runner or "DirectRunner", standard.runner)
  if standard.runner == RUNNERS["DaskRunner"]:
    try:  # registers the --dask_* options
      importlib.import_module(standard.runner.rsplit(".", 1)[0])
    except ImportError as e:
      raise errors.InputError(errors.describe(
          "--runner=DaskRunner", f"needs dask and distributed ({errors.one_line(e)})",
          "pip install -e '.[dask]'")) from e
  _check_runner(standard.runner)
  unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) -
                   set(options.get_all_options()))
  if unknown:  # Beam would only log "Discarding unparseable args" and go on
    raise errors.InputError(errors.describe(
        " ".join(f"--{name}" for name in unknown),
        "not a flag of this pipeline nor a Beam pipeline option",
        "Check the spelling (--helpfull lists the pipeline's flags; Beam's options are in "
        "apache_beam.options.pipeline_options)"))
  return options


def run_and_print(run_pipeline: Callable[[beam.Pipeline, Any], Dict[str, int]], config: Any,
                  passthrough: Optional[str], beam_args: Sequence[str]) -> None:
  """A pipeline binary's run: `run_pipeline(pipeline, config)` on a pipeline of
  `pipeline_options(passthrough, beam_args)`, then each of its counters logged and printed."""
  counters = run_pipeline(beam.Pipeline(options=pipeline_options(passthrough, beam_args)), config)
  for name, value in counters.items():
    logging.info("%s: %d", name, value)
    print(f"{name}: {value}")


def _check_runner(name: str) -> None:
  """Raises InputError naming `--runner` if Beam cannot create the runner `name`."""
  try:
    beam_runner_base.create_runner(name)
  except (ValueError, ImportError, AttributeError) as e:
    problem = ("unknown Beam runner" if isinstance(e, ValueError) else
               f"the runner cannot be loaded ({type(e).__name__}: {errors.one_line(e)})")
    raise errors.InputError(errors.describe(
        f"--runner={name}", problem,
        "Pass DirectRunner (the default), DaskRunner, DataflowRunner, FlinkRunner, SparkRunner, "
        "PortableRunner or the module.Class of a PipelineRunner subclass")) from e


def run(pipeline: beam.Pipeline) -> Dict[str, int]:
  """Runs `pipeline` to completion; returns its counters {name: value} (committed values
  where the runner reports them, attempted otherwise; {} where it collects no metrics).

  Raises:
    RuntimeError: the pipeline did not finish in state DONE.
  """
  result = pipeline.run()
  state = result.wait_until_finish()
  if state is not None and str(state) not in ("DONE", "PipelineState.DONE"):
    raise RuntimeError(f"pipeline finished in state {state}")
  counters = {}
  try:
    query = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))
  except NotImplementedError:  # Beam's DaskRunner
    logging.info("%s collects no metrics; counts are derived from the outputs",
                 type(result).__name__)
    return counters
  for result_counter in query["counters"]:
    value = result_counter.committed
    if value is None:
      value = result_counter.attempted
    name = result_counter.key.metric.name
    counters[name] = counters.get(name, 0) + int(value or 0)
  return dict(sorted(counters.items()))
