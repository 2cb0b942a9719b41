"""Host memory bandwidth beside a device's host-to-device copies: whether a CPU device and a GPU
fed from host memory on one machine compete for the same memory bandwidth.

    python bench/host_bandwidth.py --device fl:1 --mb 256

Each measurement runs for --seconds and prints payload GB/s (bytes of the buffer per second;
a host copy reads and writes each byte, so memory traffic is twice that):

  host copy, N threads   PyTorch's CPU copy_ between two --mb buffers, torch threads = N;
  h2d pageable / pinned  copies of a --mb host buffer to --device, each waited for;
  h2d pageable + host copy N threads
                         both at once, one Python thread each: each side's GB/s, and their
                         sum against each alone.

No native anchor: the question is how much one side's copies slow the other's on this host.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time

import torch

import torch_fl  # noqa: F401 - registers the fl device
from torch_fl.parallel import device_context, synchronize_device


def _rate(fn, nbytes: int, seconds: float, stop: threading.Event | None = None) -> float:
    """GB/s of `fn` (which moves `nbytes`) called until `seconds` pass or `stop` is set."""
    fn()  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and not (stop is not None and stop.is_set()):
        fn()
        count += 1
    return count * nbytes / (time.perf_counter() - start) / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", required=True, help="the device to copy to (an fl device of a GPU plugin, or cuda:0)")
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--threads", nargs="+", type=int, default=[1, 4, 8, 0], help="host copy threads (0: all cores)")
    p.add_argument("--json", default="")
    args = p.parse_args()

    n = args.mb << 20
    cores = os.cpu_count() or 1
    threads = sorted({t or cores for t in args.threads})
    dev = torch.device(args.device)
    src, dst = torch.ones(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
    pinned = torch.ones(n, dtype=torch.uint8).pin_memory()
    on_device = torch.empty(n, dtype=torch.uint8, device=dev)

    def h2d(host: torch.Tensor):
        def run():
            with device_context(dev):
                on_device.copy_(host)
                synchronize_device(dev)
        return run

    out: dict = {"device": args.device, "mb": args.mb, "cores": cores, "host_copy": {}, "both": {}}
    for t in threads:
        torch.set_num_threads(t)
        out["host_copy"][t] = _rate(lambda: dst.copy_(src), n, args.seconds)
    out["h2d_pageable"] = _rate(h2d(src), n, args.seconds)
    out["h2d_pinned"] = _rate(h2d(pinned), n, args.seconds)
    host2, dst2 = torch.ones(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
    for t in threads:
        torch.set_num_threads(t)
        stop, result = threading.Event(), {}

        def background():
            result["host"] = _rate(lambda: dst2.copy_(host2), n, 1e9, stop)

        worker = threading.Thread(target=background)
        worker.start()
        time.sleep(0.05)
        try:
            h2d_rate = _rate(h2d(src), n, args.seconds)
        finally:
            stop.set()
            worker.join()
        out["both"][t] = {"h2d_pageable": h2d_rate, "host_copy": result["host"]}

    print(f"{args.device}, {args.mb} MiB buffers, {cores} cores; payload GB/s (a host copy moves twice that)")
    for t, v in out["host_copy"].items():
        print(f"  host copy, {t:2d} threads: {v:6.1f}")
    print(f"  h2d pageable: {out['h2d_pageable']:6.1f}   h2d pinned: {out['h2d_pinned']:6.1f}")
    for t, v in out["both"].items():
        alone = out["h2d_pageable"] + out["host_copy"][t]
        together = v["h2d_pageable"] + v["host_copy"]
        print(f"  h2d pageable {v['h2d_pageable']:6.1f} + host copy ({t:2d} threads) {v['host_copy']:6.1f} at once "
              f"= {together:6.1f}, against {alone:6.1f} apart ({together / alone:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
