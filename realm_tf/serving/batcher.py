"""Micro-batching: concurrent questions -> one batched call on a single worker thread.

Requests wait in a bounded queue. The worker takes the oldest, then keeps taking requests
until it holds `max_batch_size` of them or `max_wait_ms` have passed, and answers them with
one call of `answer_batch(questions [B], top_k) -> B results` per distinct `top_k` (so one
retrieval and one reader forward pass per batch). Results go back to the event loop that
submitted them; the model work never runs on the event loop.
"""
import asyncio
import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

AnswerBatch = Callable[[Sequence[str], int], Sequence[Any]]


class Overloaded(RuntimeError):
  """The queue is full: the client should retry later (HTTP 503)."""


@dataclasses.dataclass
class _Request:
  question: str
  top_k: int
  future: asyncio.Future
  loop: asyncio.AbstractEventLoop


def _resolve(future: asyncio.Future, result: Any, error: Optional[BaseException]) -> None:
  if future.cancelled():  # the client went away
    return
  if error is not None:
    future.set_exception(error)
  else:
    future.set_result(result)


class Batcher:
  """Answers submitted questions in batches on one worker thread.

  Args:
    answer_batch: questions [B] and top_k -> B answers, in order.
    max_batch_size: most questions per batch.
    max_wait_ms: how long the worker waits for a batch to fill after its first question.
    max_queue: most questions waiting; more are refused with `Overloaded`.
  """

  def __init__(self, answer_batch: AnswerBatch, max_batch_size: int = 16,
               max_wait_ms: float = 5.0, max_queue: int = 256):
    if max_batch_size < 1 or max_queue < 1 or max_wait_ms < 0:
      raise ValueError(f"max_batch_size {max_batch_size} and max_queue {max_queue} must be "
                       f">= 1 and max_wait_ms {max_wait_ms} >= 0")
    self.answer_batch = answer_batch
    self.max_batch_size, self.max_wait = int(max_batch_size), max_wait_ms / 1000.0
    self._queue: "queue.Queue[Optional[_Request]]" = queue.Queue(maxsize=max_queue)
    self._thread: Optional[threading.Thread] = None
    self.batch_sizes: List[int] = []  # of every batch answered, for tests and statistics

  def start(self) -> None:
    if self._thread is None:
      self._thread = threading.Thread(target=self._work, name="realm-serve-batcher",
                                      daemon=True)
      self._thread.start()

  def stop(self) -> None:
    """Lets the worker finish the queued questions, then ends it."""
    if self._thread is not None:
      self._queue.put(None)
      self._thread.join()
      self._thread = None

  async def submit(self, question: str, top_k: int) -> Any:
    """The answer to `question`, once its batch is done.

    Raises:
      Overloaded: the queue is full.
      Exception: whatever `answer_batch` raised for the batch.
    """
    loop = asyncio.get_running_loop()
    request = _Request(question, top_k, loop.create_future(), loop)
    try:
      self._queue.put_nowait(request)
    except queue.Full:
      raise Overloaded(f"{self._queue.maxsize} questions are already waiting") from None
    return await request.future

  def _take_batch(self, first: _Request) -> List[Optional[_Request]]:
    batch = [first]
    deadline = time.monotonic() + self.max_wait
    while len(batch) < self.max_batch_size:
      try:
        request = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
      except queue.Empty:
        break
      batch.append(request)
      if request is None:
        break
    return batch

  def _work(self) -> None:
    while True:
      first = self._queue.get()
      if first is None:
        return
      batch = self._take_batch(first)
      stopping = batch[-1] is None
      requests = [r for r in batch if r is not None]
      self.batch_sizes.append(len(requests))
      by_top_k: Dict[int, List[_Request]] = {}
      for request in requests:
        by_top_k.setdefault(request.top_k, []).append(request)
      for top_k, group in by_top_k.items():
        self._answer(top_k, group)
      if stopping:
        return

  def _answer(self, top_k: int, group: List[_Request]) -> None:
    try:
      results = list(self.answer_batch([r.question for r in group], top_k))
      errors: List[Optional[BaseException]] = [None] * len(group)
    except Exception as e:  # pylint: disable=broad-except
      results, errors = [None] * len(group), [e] * len(group)
    for request, result, error in zip(group, results, errors):
      request.loop.call_soon_threadsafe(_resolve, request.future, result, error)
