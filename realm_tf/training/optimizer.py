"""AdamW with REALM's schedule, from Model Garden (`official.nlp.optimization`).

AdamWeightDecay (decay 0.01, ε 1e-6, LayerNorm and biases excluded), global-norm clipping at
1.0 after the cross-replica all-reduce, linear warmup for min(10000, max(100, steps/10))
steps, then linear decay to 0 (DESIGN.md §3).
"""
from official.nlp import optimization

LEARNING_RATES = {"ict": 1e-4, "pretraining": 3e-5, "finetuning": 1e-5}


def warmup_steps(num_train_steps: int) -> int:
  """min(10000, max(100, steps / 10)), never more than the run itself."""
  return min(num_train_steps, min(10000, max(100, num_train_steps // 10)))


def build_optimizer(learning_rate: float, num_train_steps: int):
  """The AdamW optimizer with warmup and linear decay over `num_train_steps`."""
  if num_train_steps < 1:
    raise ValueError(f"num_train_steps must be >= 1, got {num_train_steps}")
  return optimization.create_optimizer(init_lr=learning_rate, num_train_steps=num_train_steps,
                                       num_warmup_steps=warmup_steps(num_train_steps),
                                       optimizer_type="adamw")
