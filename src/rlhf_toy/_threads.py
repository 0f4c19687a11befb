"""Run a block (or a whole function) of tiny-tensor work on one PyTorch thread.

The book's tensors are tiny: intra-op threads only add overhead, and on a busy 2-core machine
two threads fighting over the cores make a 20x8 `log_softmax` a thousand times slower.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def single_thread() -> Iterator[None]:
    """临时只用一个线程，退出时恢复；既可写 `with single_thread():`，也可作装饰器 `@single_thread()`。"""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
