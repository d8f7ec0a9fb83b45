"""Maximum inner product search over document embeddings, behind one interface.

`BruteForceIndex` is exact (the oracle and the fallback); `ScannIndex` is ScaNN's approximate
search; `ShardedIndex` searches S such indexes over consecutive row ranges as one. All search
in-graph, save to a directory with a checksummed `manifest.json`, and load back with
`load_index`.
"""
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.manifest import IndexCorruptedError
from realm_tf.mips.manifest import IndexManifest
from realm_tf.mips.index_loading import load_index
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.mips.sharded_index import ShardedIndex

__all__ = [
    "BruteForceIndex",
    "IndexCorruptedError",
    "IndexManifest",
    "MipsIndex",
    "ScannIndex",
    "ShardedIndex",
    "load_index",
]
