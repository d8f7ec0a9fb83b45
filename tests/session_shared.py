"""What the xdist workers of one test session share: a directory under the session's base
temporary directory, and file locks in it (a run made once and read by several test files)."""
import contextlib
import fcntl
import os


def shared_directory(tmp_path_factory, name: str) -> str:
  """`<the session's base temporary directory>/<name>`, the same for every xdist worker."""
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    base = base.parent  # the workers' base directories are children of the session's
  directory = os.path.join(str(base), name)
  os.makedirs(directory, exist_ok=True)
  return directory


@contextlib.contextmanager
def locked(path: str):
  """Holds an exclusive lock on the file at `path` (made if missing)."""
  with open(path, "w", encoding="utf-8") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)
