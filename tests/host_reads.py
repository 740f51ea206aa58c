"""Counting reads of tensor values by the host: on a GPU each one makes the host wait until the device has
finished all the work queued before it. On a CPU the same calls are counted, so tests can bound them."""

from torch.overrides import TorchFunctionMode

# the Tensor methods that hand a value to Python (nonzero: its output's size depends on the values)
READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy", "equal", "allclose"}


class HostReads(TorchFunctionMode):
    """``with HostReads() as reads: ...``; then ``reads.count`` and ``reads.calls`` (names in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return len(self.calls)
