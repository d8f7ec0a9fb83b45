"""Running a Beam pipeline from absl flags, and reading its counters back.

Every binary of `pipelines/` takes its own absl flags; the flags it does not know are Beam's
(runner, project, workers, ...), as are those of `--pipeline_options`, a string passed through
unchanged:

    --runner=DataflowRunner --project=P --region=R --temp_location=gs://... --setup_file=./setup.py
    --pipeline_options="--direct_num_workers=2 --direct_running_mode=multi_processing"

Counters of all stages share the namespace `COUNTER_NAMESPACE`.
"""
import shlex
from typing import Dict, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from realm_tf import errors

COUNTER_NAMESPACE = "realm_tf.pipelines"


def counter(name: str):
  """A Beam counter of the pipelines' namespace."""
  return beam.metrics.Metrics.counter(COUNTER_NAMESPACE, name)


def pipeline_options(passthrough: Optional[str] = None,
                     beam_args: Sequence[str] = ()) -> PipelineOptions:
  """Beam options from `beam_args` (a binary's flags absl did not know) and a
  `--pipeline_options` string (shell-quoted flags); default runner: DirectRunner."""
  flags = list(beam_args) + shlex.split(passthrough or "")
  if not any(f.startswith("--runner") for f in flags):
    flags.append("--runner=DirectRunner")
  options = PipelineOptions(flags)
  unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) -
                   set(options.get_all_options()))
  if unknown:  # Beam would only log "Discarding unparseable args" and go on
    raise errors.InputError(errors.describe(
        " ".join(f"--{name}" for name in unknown),
        "not a flag of this pipeline nor a Beam pipeline option",
        "Check the spelling (--helpfull lists the pipeline's flags; Beam's options are in "
        "apache_beam.options.pipeline_options)"))
  return options


def run(pipeline: beam.Pipeline) -> Dict[str, int]:
  """Runs `pipeline` to completion; returns its counters {name: value} (committed values
  where the runner reports them, attempted otherwise).

  Raises:
    RuntimeError: the pipeline did not finish in state DONE.
  """
  result = pipeline.run()
  state = result.wait_until_finish()
  if state is not None and str(state) not in ("DONE", "PipelineState.DONE"):
    raise RuntimeError(f"pipeline finished in state {state}")
  counters = {}
  query = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))
  for result_counter in query["counters"]:
    value = result_counter.committed
    if value is None:
      value = result_counter.attempted
    name = result_counter.key.metric.name
    counters[name] = counters.get(name, 0) + int(value or 0)
  return dict(sorted(counters.items()))
