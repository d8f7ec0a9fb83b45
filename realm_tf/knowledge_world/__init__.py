"""A synthetic knowledge world for proving that REALM learns, and the ablation benchmark."""
