"""Seed 2 of the small knowledge-world ablation (`ablation_seeds.SeedChecks`)."""
# bazel-size: large
import ablation_seeds


class TestSeed2(ablation_seeds.SeedChecks):
  SEED = 2
