"""`--runner=DaskRunner`: Beam's DaskRunner with what the corpus pipelines need fixed.

Beam 2.77's `apache_beam.runners.dask.DaskRunner` (`dask.bag` on a `dask.distributed`
cluster, `--dask_client_address=tcp://HOST:8786` or a `LocalCluster`) runs none of the three
pipelines correctly: a multi-output DoFn's outputs reach every consumer untagged,
`finish_bundle` outputs are dropped, only the last transform's bag is computed, side inputs
re-run their producers inside their readers, and a bounded `Read` produces nothing. This runner
keeps Beam's Create, GroupByKey and Flatten and replaces the rest: a ParDo's bag holds (tag,
value) pairs, finish-bundle outputs are kept, side inputs are task dependencies, a bounded
source is split into bundles read in parallel, and every unconsumed bag is computed, in one
graph.

Not supported (the pipelines use none): windowing other than the global window, streaming,
state and timers, splittable DoFns. Metrics are not collected; Reshuffle is the identity.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.io import iobase
from apache_beam.pipeline import AppliedPTransform
from apache_beam.pipeline import PipelineVisitor
from apache_beam.runners import common
from apache_beam.runners.runner import PipelineState
from apache_beam.runners.dask import dask_runner
from apache_beam.runners.dask import overrides
from apache_beam.runners.dask import transform_evaluator
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue
import dask
import dask.bag as db
import dask.distributed as ddist

_BUNDLE_BYTES = 64 << 20  # desired size of a bounded source's bundles


def _global(value: Any) -> WindowedValue:
  return WindowedValue(value, 0, (GlobalWindow(),))


@dataclasses.dataclass
class _Receiver(common.Receiver):
  """Collects a DoFn's outputs of one tag as (tag, value) pairs."""
  tag: Optional[str]
  out: List[Tuple[Optional[str], Any]]

  def receive(self, windowed_value: WindowedValue):
    self.out.append((self.tag, windowed_value.value))


class _Receivers(dict):
  """tag -> `_Receiver`, created on first use."""

  def __init__(self, out: List[Tuple[Optional[str], Any]]):
    super().__init__()
    self.out = out

  def __missing__(self, tag):
    self[tag] = _Receiver(tag, self.out)
    return self[tag]


@dataclasses.dataclass
class _DoFnSpec:
  """What a task needs to run a ParDo on a partition (pickled with the task)."""
  label: str
  fn: beam.DoFn
  args: Sequence[Any]
  kwargs: Dict[str, Any]
  window_fn: Any
  side_views: Sequence[Tuple[type, Dict[str, Any]]]  # (view class, view options) per input


def _run_dofn(items: Sequence[Any], spec: _DoFnSpec, *side_values: List[Any]):
  """One partition through the DoFn of `spec` (one bundle): its (tag, value) outputs, those
  of `finish_bundle` included. `side_values`: each side input's values."""
  out: List[Tuple[Optional[str], Any]] = []
  receivers = _Receivers(out)
  handler = common._OutputHandler(  # pylint: disable=protected-access
      window_fn=spec.window_fn, main_receivers=receivers[None], tagged_receivers=receivers,
      per_element_output_counter=None, output_batch_converter=None,
      process_yields_batches=False, process_batch_yields_elements=False)
  side_inputs = [SideInputMap(view, options, [_global(v) for v in values])
                 for (view, options), values in zip(spec.side_views, side_values)]
  invoker = common.DoFnInvoker.create_invoker(
      common.DoFnSignature(spec.fn), handler, context=common.DoFnContext(spec.label),
      side_inputs=side_inputs, input_args=list(spec.args), input_kwargs=spec.kwargs,
      user_state_context=None, bundle_finalizer_param=beam.DoFn.BundleFinalizerParam())
  invoker.invoke_setup()
  invoker.invoke_start_bundle()
  for item in items:
    invoker.invoke_process(transform_evaluator.get_windowed_value(item, spec.window_fn))
  invoker.invoke_finish_bundle()
  invoker.invoke_teardown()
  return out


def _select(pairs: Sequence[Tuple[Optional[str], Any]], tag: Optional[str]) -> List[Any]:
  return [value for t, value in pairs if t == tag]


def _concat(*partitions: List[Any]) -> List[Any]:
  return [value for partition in partitions for value in partition]


def _read_bundles(bundles: Sequence[iobase.SourceBundle]) -> List[Any]:
  values = []
  for bundle in bundles:
    tracker = bundle.source.get_range_tracker(bundle.start_position, bundle.stop_position)
    values.extend(bundle.source.read(tracker))
  return values


class _BagVisitor(PipelineVisitor):
  """Translates each leaf transform to a `dask.bag.Bag` (in topological order)."""

  def __init__(self, bag_kwargs: Dict[str, Any]):
    super().__init__()
    self.bag_kwargs = bag_kwargs
    self.bags: Dict[AppliedPTransform, Optional[db.Bag]] = {}
    self.tagged: Set[AppliedPTransform] = set()  # ParDos: bags of (tag, value)
    self.consumed: Set[AppliedPTransform] = set()

  def _bag(self, pcoll: pvalue.PCollection) -> db.Bag:
    producer = pcoll.producer
    self.consumed.add(producer)
    bag = self.bags[producer]
    if producer in self.tagged:
      bag = bag.map_partitions(_select, pcoll.tag)
    return bag

  def visit_transform(self, transform_node: AppliedPTransform) -> None:
    transform = transform_node.transform
    inputs = [self._bag(i) for i in transform_node.inputs
              if not isinstance(i, pvalue.PBegin)]
    if type(transform) is beam.ParDo:  # pylint: disable=unidiomatic-typecheck
      self.bags[transform_node] = self._par_do(transform_node, inputs[0])
      self.tagged.add(transform_node)
    elif isinstance(transform, overrides._Read):  # pylint: disable=protected-access
      bundles = list(transform.source.split(_BUNDLE_BYTES))
      self.bags[transform_node] = db.from_sequence(
          bundles, npartitions=max(1, len(bundles))).map_partitions(_read_bundles)
    else:
      op_class = transform_evaluator.TRANSLATIONS.get(type(transform),
                                                      transform_evaluator.NoOp)
      op = op_class(transform_node, bag_kwargs=self.bag_kwargs)
      if isinstance(op, transform_evaluator.Flatten):
        self.bags[transform_node] = op.apply(inputs)
      else:
        self.bags[transform_node] = op.apply(inputs[0] if inputs else None)

  def _par_do(self, transform_node: AppliedPTransform, input_bag: db.Bag) -> db.Bag:
    transform = transform_node.transform
    args, kwargs = transform.raw_side_inputs
    main_input = next(iter(transform_node.main_inputs.values()))
    side_values = []
    for side in transform_node.side_inputs:
      parts = self._bag(side.pvalue).to_delayed(optimize_graph=False)
      side_values.append(dask.delayed(_concat)(*parts))
    spec = _DoFnSpec(
        transform_node.full_label, transform.fn, args, kwargs,
        main_input.windowing.windowfn if hasattr(main_input, "windowing") else None,
        [(type(side), side._view_options())  # pylint: disable=protected-access
         for side in transform_node.side_inputs])
    return input_bag.map_partitions(_run_dofn, spec, *side_values)

  def sinks(self) -> List[db.Bag]:
    """The bags no transform consumes: computing them runs the whole pipeline."""
    return [bag for node, bag in self.bags.items()
            if node not in self.consumed and bag is not None]


@dataclasses.dataclass
class DaskRunnerResult(dask_runner.DaskRunnerResult):
  """Beam's result, closing the client once the pipeline finished."""

  def wait_until_finish(self, duration=None) -> str:
    try:
      return super().wait_until_finish(duration)
    finally:
      if self.state != PipelineState.RUNNING:
        self.client.close()


class DaskRunner(dask_runner.DaskRunner):
  """Runs a batch pipeline on a Dask cluster (see the module docstring)."""

  def run_pipeline(self, pipeline, options):
    dask_options = options.view_as(dask_runner.DaskOptions).get_all_options(
        drop_default=True, current_only=True)
    bag_kwargs = dask_runner.DaskOptions._extract_bag_kwargs(  # pylint: disable=protected-access
        dask_options)
    client = ddist.Client(**dask_options)
    pipeline.replace_all(overrides.dask_overrides())
    visitor = _BagVisitor(bag_kwargs)
    pipeline.visit(visitor)
    return DaskRunnerResult(client, client.compute(visitor.sinks()))
