"""REALM's AdamW: BERT's warm-up and decay schedule, and which variables decay."""
import pytest

from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.optimizer import default_warmup_steps


def test_optimizer_schedule_and_decay_exclusions():
  optimizer = create_optimizer(OptimizerConfig(learning_rate=1e-3, num_train_steps=100,
                                               warmup_steps=10))
  schedule = optimizer.learning_rate
  assert float(schedule(5)) == pytest.approx(0.5e-3)  # warm-up to the peak
  assert float(schedule(10)) == pytest.approx(1e-3 * 0.9)  # decay from step 0
  assert float(schedule(100)) == pytest.approx(0.0)
  # A run shorter than the default warm-up still reaches its peak at the end.
  short = create_optimizer(OptimizerConfig(learning_rate=1e-3, num_train_steps=50))
  assert float(short.learning_rate(49)) == pytest.approx(0.98e-3)
  assert optimizer.epsilon == 1e-6 and optimizer.gradient_clip_norm == 1.0
  decays = optimizer._do_use_weight_decay  # pylint: disable=protected-access
  assert decays("query_bert/transformer/layer_0/self_attention/query/kernel:0")
  assert not decays("query_bert/embeddings/layer_norm/gamma:0")
  assert not decays("span_scorer/layer_normalization/beta:0")
  assert not decays("query_bert/pooler_transform/bias:0")
  assert default_warmup_steps(100_000) == 10_000 and default_warmup_steps(300) == 100
  assert default_warmup_steps(50) == 50
