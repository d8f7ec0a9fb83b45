"""The binaries' flags in groups, each flag name defined in one module (after Model Garden's
`official/utils/flags`): a binary calls the groups it needs and adopts their modules' key flags
for its `--help`.

    config_flags.py  ConfigFlags: flags onto a config's settings, no defaults of their own
    runtime.py, trainer.py, model.py, lengths.py, init.py, data.py, index.py,
    pretraining.py, open_qa.py
                     the training binaries' groups, each onto its fragment of the experiment
                     config (`define_*_flags(config)`), and the definers shared with others
    paths.py         --model_dir, --output_dir, --corpus, --vocab_file, --embeddings_dir
    qa_model.py      the binaries that load a QA model; beam_pipelines.py: the pipelines'
"""
