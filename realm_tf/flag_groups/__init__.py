"""The binaries' flags in groups, each flag name defined in one module (after Model Garden's
`official/utils/flags`): a binary calls the groups it needs and adopts their modules' key flags
for its `--help`.

    config_flags.py  ConfigFlags: flags onto a config's settings, no defaults of their own
"""
