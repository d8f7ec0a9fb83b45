"""Experiments: one config tree per training task and one entry point (`realm-train`).

    overrides.py     "trainer.num_steps=10,task.model.encoder=tiny" and JSON config files
    registry.py      the registered experiments (`ict`, `pretrain`, `open_qa`, `classification`):
                     every training default, and `build(name, config_file, params_override)`
    base_task.py     Task: build_model / initialize / run; a previous stage's run
    ict_task.py, pretrain_task.py, open_qa_task.py, classification_task.py
                     the tasks, through `training.ict_lib`, `training.pretraining_lib`,
                     `qa.finetune_lib`, `classification.trainer` (one `train_loop.TrainLoop`)
    train_lib.py     run_experiment(config)
    chain.py         a chain's stages (the demo, the ablations, the real-data chain)

Stages chain through `task.init.checkpoint` (the previous stage's `trainer.model_dir`). The
config tree itself is `realm_tf.experiment_config`, which the libraries take too.
"""
