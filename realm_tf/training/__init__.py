"""Training: ICT warm-start, REALM pre-training with asynchronous index refresh."""
