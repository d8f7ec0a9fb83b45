"""realm_tf: REALM (Guu et al. 2020) in TF2/Keras."""
