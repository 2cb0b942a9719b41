"""Bad indices on an fl device become Python exceptions, and the device works on afterwards.

Usage: check_device_errors.py [fl:N]   (default fl:0; any plugin)

Each case runs an op with one index (or loss target) out of range, then the call that waits
for the device (`.cpu()`, `.item()`, `torch.fl.synchronize()`, a side stream's synchronize);
a wait for another stream, or for an event, must leave the report to those.
It must raise RuntimeError with a message naming the value and the size, a second wait must
not raise again, and the same op with good indices on the same device must then give ATen's
CPU result. ATen's own CUDA kernels stop at a device-side assert here, after which the process
cannot use the GPU any more.

Prints one line per case; exits 0 when every case holds, 1 otherwise.
"""
from __future__ import annotations

import re
import sys
from typing import Callable

import torch
import torch.nn.functional as F

import torch_fl  # noqa: F401  (registers the fl device)


def _expect_error(run_and_wait: Callable[[], object], pattern: str) -> str:
    try:
        run_and_wait()
    except RuntimeError as error:
        text = str(error)
        if not re.search(pattern, text, re.IGNORECASE):
            raise AssertionError(f"raised, but the message does not match {pattern!r}: {text}") from None
        return text.splitlines()[0]
    raise AssertionError("no exception: the bad index went unreported")


def _expect_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    if not torch.allclose(actual.cpu(), expected, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"{what}: got {actual.cpu()} instead of {expected}")


def cases(device: str) -> dict[str, Callable[[], str]]:
    x = torch.arange(12.0).reshape(3, 4)
    xd = x.to(device)
    weight = torch.randn(5, 4)
    logits = torch.randn(3, 4)

    def gather() -> str:
        bad = torch.tensor([[0, 1, 3, 0]])
        text = _expect_error(lambda: torch.gather(xd, 0, bad.to(device)).cpu(),
                             r"index 3 is out of bounds for dimension 0 with size 3")
        torch.fl.synchronize(device)  # the report was cleared by the wait that raised it
        good = torch.tensor([[0, 1, 2, 0]])
        _expect_equal(torch.gather(xd, 0, good.to(device)), torch.gather(x, 0, good), "gather after the error")
        return text

    def embedding() -> str:
        wd = weight.to(device)
        text = _expect_error(lambda: F.embedding(torch.tensor([0, 10, 2]).to(device), wd).cpu(),
                             r"index 10 is out of (range|bounds)")
        good = torch.tensor([4, 0, 2])
        _expect_equal(F.embedding(good.to(device), wd), F.embedding(good, weight), "embedding after the error")
        return text

    def cross_entropy() -> str:
        ld = logits.to(device)
        text = _expect_error(lambda: F.cross_entropy(ld, torch.tensor([1, 7, 0]).to(device)).item(),
                             r"target 7 is out of bounds")
        good = torch.tensor([1, 3, 0])
        _expect_equal(F.cross_entropy(ld, good.to(device)), F.cross_entropy(logits, good), "cross_entropy after")
        # ignore_index is not an error
        ignored = torch.tensor([1, -100, 0])
        _expect_equal(F.cross_entropy(ld, ignored.to(device)), F.cross_entropy(logits, ignored), "ignore_index")
        return text

    def scatter_add_then_synchronize() -> str:
        zeros = torch.zeros(2, 3)
        index = torch.tensor([[0, -5, 1]])
        out = zeros.to(device).scatter_add(1, index.to(device), torch.ones(1, 3).to(device))
        text = _expect_error(lambda: torch.fl.synchronize(device), r"index -5 is out of bounds for dimension 1 with size 3")
        del out
        good = torch.tensor([[0, 2, 1]])
        _expect_equal(zeros.to(device).scatter_add(1, good.to(device), torch.ones(1, 3).to(device)),
                      zeros.scatter_add(1, good, torch.ones(1, 3)), "scatter_add after the error")
        return text

    def side_stream() -> str:
        stream = torch.fl.Stream(device)
        with torch.fl.stream(stream):
            out = torch.gather(xd, 1, torch.tensor([[4], [0], [1]]).to(device))
        text = _expect_error(stream.synchronize, r"index 4 is out of bounds for dimension 1 with size 4")
        del out
        good = torch.tensor([[3], [0], [1]])
        with torch.fl.stream(stream):
            result = torch.gather(xd, 1, good.to(device))
        stream.synchronize()
        _expect_equal(result, torch.gather(x, 1, good), "gather on the side stream after the error")
        return text

    def other_stream_waits_leave_it() -> str:
        stream = torch.fl.Stream(device)
        with torch.fl.stream(stream):
            out = torch.gather(xd, 0, torch.tensor([[7, 0, 0, 0]]).to(device))
        torch.fl.current_stream(device).synchronize()  # another stream's wait: no report for it
        event = torch.fl.Event()
        event.record(stream)
        event.synchronize()  # an event's wait leaves it too
        text = _expect_error(stream.synchronize, r"index 7 is out of bounds for dimension 0 with size 3")
        del out
        return text

    return {"gather": gather, "embedding": embedding, "cross_entropy": cross_entropy,
            "scatter_add then torch.fl.synchronize": scatter_add_then_synchronize, "side stream": side_stream,
            "other streams' and events' waits leave it": other_stream_waits_leave_it}


def main(argv: list[str]) -> int:
    device = argv[1] if len(argv) > 1 else "fl:0"
    failures = 0
    for name, case in cases(device).items():
        try:
            message = case()
            print(f"ok    {name}: {message}")
        except Exception as error:  # noqa: BLE001 - every failure is reported, then the next case runs
            failures += 1
            print(f"FAIL  {name}: {type(error).__name__}: {error}")
    print(f"{device}: {len(cases(device)) - failures} of {len(cases(device))} cases hold")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
