"""The package layers of realm_tf: imports go one way.

Every module under realm_tf/ is parsed (ast, so imports inside functions count too) and each
import of a realm_tf module becomes an edge between packages: a subpackage (`realm_tf.qa`)
or a top-level module (`realm_tf.retrieve_and_read`). The graph must have no cycle, and the
TF Hub export must sit below the stages it exports: `export` imports none of the trainers,
fine-tuning or the demos, and trainers and fine-tuning do not import `export`.
"""
import ast
import collections
import pathlib
from typing import Dict, List, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent / "realm_tf"
EXPORT_MUST_NOT_IMPORT = ("qa", "training", "demo", "knowledge_world")
MUST_NOT_IMPORT_EXPORT = ("qa", "training")


def _node(module: str) -> str:
  """realm_tf.a.b -> "a" (a subpackage or a top-level module); "realm_tf" for the root."""
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else "realm_tf"


def _imported(tree: ast.AST) -> List[str]:
  """Dotted names of the realm_tf modules (or packages) a module imports."""
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names += [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      if node.module == "realm_tf":  # from realm_tf import cli
        names += [f"realm_tf.{alias.name}" for alias in node.names]
      else:
        names.append(node.module)
  return [name for name in names if name.startswith("realm_tf.")]


def package_graph() -> Dict[str, Dict[str, Set[str]]]:
  """{package: {imported package: {files that import it}}}, without self-edges."""
  graph: Dict[str, Dict[str, Set[str]]] = collections.defaultdict(
      lambda: collections.defaultdict(set))
  for path in sorted(ROOT.rglob("*.py")):
    relative = path.relative_to(ROOT.parent)
    source = _node(".".join(relative.with_suffix("").parts))
    for name in _imported(ast.parse(path.read_text(encoding="utf-8"), str(path))):
      target = _node(name)
      if target not in (source, "realm_tf"):
        graph[source][target].add(str(relative))
  return graph


def find_cycle(graph: Dict[str, Dict[str, Set[str]]]) -> List[str]:
  """One cycle [a, b, ..., a] of the graph, or [] (depth-first search)."""
  state: Dict[str, int] = {}  # 1: on the current path, 2: done
  path: List[str] = []

  def visit(node: str) -> List[str]:
    state[node] = 1
    path.append(node)
    for target in sorted(graph.get(node, {})):
      if state.get(target) == 1:
        return path[path.index(target):] + [target]
      if target not in state:
        cycle = visit(target)
        if cycle:
          return cycle
    state[node] = 2
    path.pop()
    return []

  for node in sorted(graph):
    if node not in state:
      cycle = visit(node)
      if cycle:
        return cycle
  return []


def _edges(graph, pairs: List[Tuple[str, str]]) -> List[str]:
  return [f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})" for a, b in pairs]


def test_the_parser_sees_the_known_layers():
  graph = package_graph()
  assert "tokenization" in graph["training"]  # from realm_tf.tokenization... import
  assert "cli" in graph["export_hub"]  # from realm_tf import cli
  assert "qa" in graph["serving"]  # an import inside a function counts


def test_find_cycle():
  edges = lambda pairs: {a: {b: {"f.py"} for x, b in pairs if x == a} for a, _ in pairs}
  assert find_cycle(edges([("a", "b"), ("b", "c")])) == []
  assert find_cycle(edges([("a", "b"), ("b", "c"), ("c", "a")])) == ["a", "b", "c", "a"]


def test_packages_import_each_other_one_way():
  graph = package_graph()
  cycle = find_cycle(graph)
  assert not cycle, "import cycle: " + "; ".join(_edges(graph, list(zip(cycle, cycle[1:]))))


def test_export_is_below_the_stages_it_exports():
  graph = package_graph()
  upward = [("export", p) for p in EXPORT_MUST_NOT_IMPORT if p in graph["export"]]
  upward += [(p, "export") for p in MUST_NOT_IMPORT_EXPORT if "export" in graph[p]]
  assert not upward, "; ".join(_edges(graph, upward))
