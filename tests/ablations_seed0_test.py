"""Seed 0 of the small knowledge-world ablation (`ablation_seeds.SeedChecks`)."""
# bazel-size: large
import ablation_seeds


class TestSeed0(ablation_seeds.SeedChecks):
  SEED = 0
