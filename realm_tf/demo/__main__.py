"""`python -m realm_tf.demo`: the `realm-demo` binary (`realm_tf.demo.main`)."""
from absl import flags

from realm_tf.demo import main

flags.adopt_module_key_flags(main)  # --helpshort lists the demo's flags
main.run()
