"""Running an application on uvicorn: `serve` in the foreground (the binary), or
`BackgroundServer` on a thread (tests and benchmarks), both on 127.0.0.1 unless told."""
import socket
import threading
import time

import uvicorn

DEFAULT_HOST = "127.0.0.1"


def serve(app, host: str = DEFAULT_HOST, port: int = 8080) -> None:
  """Serves `app` until interrupted (Ctrl-C / SIGTERM)."""
  uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


class BackgroundServer:
  """`app` served on a free port of `host` from a daemon thread; a context manager.

  Attributes:
    url: "http://<host>:<port>" once started.
  """

  def __init__(self, app, host: str = DEFAULT_HOST):
    self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    self._socket.bind((host, 0))
    self.url = f"http://{host}:{self._socket.getsockname()[1]}"
    self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    self._thread = threading.Thread(target=self._server.run,
                                    kwargs={"sockets": [self._socket]}, daemon=True)

  def __enter__(self) -> "BackgroundServer":
    self._thread.start()
    deadline = time.monotonic() + 600  # a bound on a hang; a loaded host may start slowly
    while not self._server.started:
      if not self._thread.is_alive() or time.monotonic() > deadline:
        raise RuntimeError(f"the server on {self.url} did not start")
      time.sleep(0.01)
    return self

  def __exit__(self, *exc_info) -> None:
    self._server.should_exit = True
    self._thread.join(timeout=30)
    self._socket.close()
