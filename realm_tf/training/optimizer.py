"""REALM's AdamW optimizer (ICT, pre-training, fine-tuning), from Model Garden.

AdamW (`official.modeling.optimization.legacy_adamw.AdamWeightDecay`: decay 0.01, β 0.9/0.999,
ε 1e-6, LayerNorm and bias excluded from decay, gradients clipped to global norm 1.0) with
BERT's schedule (`official.nlp.optimization.WarmUp`): a linear warm-up from 0 to the peak
learning rate over min(10000, max(100, steps / 10)) steps, then the linear decay to 0 at the
last step that started at step 0.

The clip applies to the global gradient: `apply_gradients` sums the replicas' gradients first,
so a step under any `tf.distribute` strategy, on any number of replicas or workers, is the
single-device step on the same global batch (the TF1 reference clipped each TPU shard's
gradient before summing, which makes the update depend on the number of shards).
"""
import dataclasses
from typing import Optional

import tensorflow as tf
from official.modeling.optimization import legacy_adamw
from official.nlp import optimization

from realm_tf.keras import keras

# Variable-name patterns kept out of weight decay: Model Garden ("*layer_norm*"), Keras
# ("layer_normalization"), TF1 names ("LayerNorm") and every bias.
NO_DECAY = ("LayerNorm", "layer_norm", "layer_normalization", "bias")


def default_warmup_steps(num_train_steps: int) -> int:
  """min(10000, max(100, steps / 10)), never more than the steps themselves."""
  return min(num_train_steps, min(10000, max(100, num_train_steps // 10)))


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """AdamW with linear warm-up and decay.

  Attributes:
    learning_rate: the peak learning rate (paper: ICT 1e-4, pre-training 3e-5, fine-tuning
      1e-5).
    num_train_steps: the decay reaches 0 here.
    warmup_steps: None: `default_warmup_steps`.
    weight_decay: decoupled weight decay rate.
    epsilon: Adam ε.
    clip_norm: global gradient-norm clip.
  """
  learning_rate: float = 1e-5
  num_train_steps: int = 10000
  warmup_steps: Optional[int] = None
  weight_decay: float = 0.01
  epsilon: float = 1e-6
  clip_norm: float = 1.0


def create_optimizer(config: OptimizerConfig) -> legacy_adamw.AdamWeightDecay:
  """Builds the optimizer; in a replicated step apply it with this module's
  `apply_gradients` (global-norm clip of the summed gradient)."""
  if config.num_train_steps < 1:
    raise ValueError(f"num_train_steps must be >= 1, got {config.num_train_steps}")
  warmup = (default_warmup_steps(config.num_train_steps) if config.warmup_steps is None
            else config.warmup_steps)
  decay = keras.optimizers.schedules.PolynomialDecay(
      initial_learning_rate=config.learning_rate, decay_steps=config.num_train_steps,
      end_learning_rate=0.0, power=1.0)
  schedule = (optimization.WarmUp(config.learning_rate, decay, warmup) if warmup > 0
              else decay)
  return legacy_adamw.AdamWeightDecay(
      learning_rate=schedule, beta_1=0.9, beta_2=0.999, epsilon=config.epsilon,
      weight_decay_rate=config.weight_decay, exclude_from_weight_decay=list(NO_DECAY),
      gradient_clip_norm=config.clip_norm)


def apply_gradients(optimizer: legacy_adamw.AdamWeightDecay, grads_and_vars) -> None:
  """Sums the gradients over the replicas, clips their global norm to the optimizer's
  `gradient_clip_norm` and applies them (in replica context, e.g. inside `strategy.run`)."""
  gradients, variables = zip(*grads_and_vars)
  context = tf.distribute.get_replica_context()
  if context.num_replicas_in_sync > 1:
    gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, list(gradients))
  if optimizer.gradient_clip_norm > 0.0:
    gradients, _ = tf.clip_by_global_norm(gradients, optimizer.gradient_clip_norm)
  optimizer.apply_gradients(zip(gradients, variables), experimental_aggregate_gradients=False)


def create_slots(optimizer: legacy_adamw.AdamWeightDecay, variables, strategy=None) -> None:
  """Creates `optimizer`'s step counter and AdamW slots (m, v) for `variables` now.

  A `tf.function` whose first call creates variables is traced a second time without creating
  them; a loop that makes the slots before its first step (after restoring a checkpoint, whose
  slot values they then take) traces its step once. Keras' legacy optimizers have no public
  `build`, so this calls the one `apply_gradients` calls.
  """
  # pylint: disable=protected-access
  with (strategy or tf.distribute.get_strategy()).scope(), tf.name_scope(optimizer._name):
    optimizer._create_all_weights(list(variables))
