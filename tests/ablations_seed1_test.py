"""Seed 1 of the small knowledge-world ablation (`ablation_seeds.SeedChecks`)."""
# bazel-size: large
import ablation_seeds


class TestSeed1(ablation_seeds.SeedChecks):
  SEED = 1
