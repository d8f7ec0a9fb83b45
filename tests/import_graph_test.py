"""The import graph of the realm_tf and pipelines packages: no cycle, and training is below
the pipelines.

Read from the source with `ast` (nothing is imported): an edge for every `import` and
`from ... import` anywhere in a module, inside functions too. `from a.b import c` is an edge to
the module `a.b.c` when there is one, else to `a.b` (its `__init__.py`); the parent packages a
module's import runs implicitly are not edges (each `__init__.py` imports its submodules).
"""
import ast
import os
from typing import Dict, List, Optional, Set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("realm_tf", "pipelines")


def _modules() -> Dict[str, str]:
  """{dotted module name: path} of every .py file of `PACKAGES`."""
  modules = {}
  for package in PACKAGES:
    for directory, dirs, files in os.walk(os.path.join(ROOT, package)):
      dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
      for name in sorted(files):
        if name.endswith(".py"):
          path = os.path.join(directory, name)
          parts = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
          modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return modules


def _imported(node: ast.AST, module: str, is_package: bool) -> List[str]:
  """The dotted names an Import / ImportFrom node imports (relative ones made absolute)."""
  if isinstance(node, ast.Import):
    return [alias.name for alias in node.names]
  base = node.module or ""
  if node.level:
    anchor = module.split(".")
    anchor = anchor if is_package else anchor[:-1]
    anchor = anchor[:len(anchor) - (node.level - 1)]
    base = ".".join(anchor + ([base] if base else []))
  return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _import_nodes(path: str) -> List[ast.AST]:
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def import_graph() -> Dict[str, Set[str]]:
  """{module: the modules of `PACKAGES` it imports}."""
  modules = _modules()
  graph = {}
  for module, path in modules.items():
    edges = set()
    for node in _import_nodes(path):
      if isinstance(node, ast.Import):
        edges.update(name for name in _imported(node, module, False) if name in modules)
      else:
        *names, base = _imported(node, module, path.endswith("__init__.py"))
        submodules = [name for name in names if name in modules]
        edges.update(submodules)
        if len(submodules) < len(names) and base in modules:  # names defined in `base`
          edges.add(base)
    edges.discard(module)
    graph[module] = edges
  return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
  """A cycle of `graph` as [m0, m1, ..., m0], or None (iterative depth-first search)."""
  state: Dict[str, int] = {}  # 1: on the current path, 2: done
  for start in sorted(graph):
    if state.get(start):
      continue
    path, stack = [start], [iter(sorted(graph[start]))]
    state[start] = 1
    while stack:
      child = next(stack[-1], None)
      if child is None:
        state[path.pop()] = 2
        stack.pop()
      elif state.get(child) == 1:
        return path[path.index(child):] + [child]
      elif not state.get(child):
        state[child] = 1
        path.append(child)
        stack.append(iter(sorted(graph.get(child, ()))))
  return None


def test_the_graph_is_read_from_the_source():
  graph = import_graph()
  assert "realm_tf.mips.index_loading" in graph["realm_tf.mips"]  # from m import name
  assert "realm_tf.mips.mips_index" in graph["realm_tf.mips.index_loading"]
  assert "realm_tf.tokenization.sentence_splitter" in graph["pipelines.block_packer"]
  # A function-level import is an edge: the binaries import their libraries in `main`.
  assert "pipelines.build_index_lib" in graph["pipelines.build_index"]


def test_find_cycle_names_the_cycle():
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
  cycle = find_cycle(import_graph())
  assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_nothing_under_realm_tf_training_imports_pipelines():
  offenders = {}
  for module, path in _modules().items():
    if module == "realm_tf.training" or module.startswith("realm_tf.training."):
      for node in _import_nodes(path):
        names = _imported(node, module, path.endswith("__init__.py"))
        if isinstance(node, ast.ImportFrom):
          names = names[:-1]  # `from a import b`: a.b
        offenders.setdefault(module, []).extend(
            name for name in names if name.split(".")[0] == "pipelines")
  offenders = {module: names for module, names in offenders.items() if names}
  assert not offenders, f"realm_tf.training imports the pipelines package: {offenders}"
