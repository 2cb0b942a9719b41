"""How much one device's forward/backward slows down while another device of the same process
works, load by load — to find what a heterogeneous pair loses to sharing one host.

    python bench/interference.py --target fl:1 --other fl:0 --workload wide --shard 1024

The target times --reps forward/backward passes of a --shard-row shard (batch copied from the
host, gradients dropped, device synchronised: what HeteroDataParallel's shard thread does), once
with nothing else running and once beside each background load, which runs in its own thread
until the target's passes end:

  train    a plain training loop on the other device (copy the batch, forward, backward,
           optimizer step, loss read back): what the other replica does in a pair;
  copy     only the batch's host-to-device copy on the other device, then a synchronize;
  compute  only forward/backward on a batch already on the other device;
  python   pure-Python arithmetic (holds the GIL between the interpreter's switches).

It prints the target's median pass time per load and its ratio to idle, and the background's
own rate beside the target against that load alone — both directions of the interference in
one run. No native PyTorch anchor: the question is what one fl device costs another.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_fl  # noqa: E402
from hetero import WORKLOADS, _batches, _optimizer  # noqa: E402
from torch_fl.parallel import device_context, synchronize_device  # noqa: E402

LOADS = ("train", "copy", "compute", "python")


class Background:
    """One load on the other device, in a thread, iterating until stopped; counts iterations."""

    def __init__(self, load: str, workload: str, device: str, batch: int, pin: bool):
        self.load, self.dev = load, torch.device(device)
        self.iterations = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if load == "python":
            return
        torch.manual_seed(0)
        self.model = WORKLOADS[workload][0]().to(self.dev)
        self.opt = _optimizer(self.model.parameters())
        self.host = _batches(workload, batch, 2, seed=1, pin=pin)
        with device_context(self.dev):
            self.resident = [(x.to(self.dev), y.to(self.dev)) for x, y in self.host]
            for _ in range(2):  # warm-up
                self.iterate()
            synchronize_device(self.dev)

    def iterate(self) -> None:
        k = self.iterations % 2
        if self.load == "python":
            total = 0
            for i in range(20000):
                total += i * i
        elif self.load == "copy":
            x, y = self.host[k]
            x.to(self.dev), y.to(self.dev)
            synchronize_device(self.dev)
        elif self.load == "compute":
            x, y = self.resident[k]
            for p in self.model.parameters():
                p.grad = None
            F.cross_entropy(self.model(x), y).backward()
            synchronize_device(self.dev)
        else:  # train
            x, y = self.host[k]
            self.opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(x.to(self.dev)), y.to(self.dev))
            loss.backward()
            self.opt.step()
            float(loss.detach().cpu())
        self.iterations += 1

    def _run(self) -> None:
        try:
            with device_context(self.dev):
                while not self._stop.is_set():
                    self.iterate()
        except BaseException as e:  # noqa: BLE001 - re-raised in stop()
            self._error = e

    def rate_alone(self, seconds: float) -> float:
        """Iterations/s with nothing else running."""
        start, before = time.perf_counter(), self.iterations
        with device_context(self.dev):
            while time.perf_counter() - start < seconds:
                self.iterate()
        return (self.iterations - before) / (time.perf_counter() - start)

    def start(self) -> None:
        self._stop.clear()
        self._started_at, self._started_count = time.perf_counter(), self.iterations
        self._thread = threading.Thread(target=self._run, name=f"load-{self.load}", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """Stops the thread; returns its iterations/s while it ran."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        return (self.iterations - self._started_count) / (time.perf_counter() - self._started_at)


def time_passes(model, dev: torch.device, data: list, shard: int, reps: int) -> dict[str, float]:
    """Median seconds of a pass ("pass") and of its phases, each timed up to a synchronize in
    separate passes: "copy" (the shard to the device), "forward" (from a device-resident
    shard) and "backward". The phases show which part slows down beside a load."""
    runs: dict[str, list[float]] = {"pass": [], "copy": [], "forward": [], "backward": []}
    with device_context(dev):
        for k in range(reps + 2):  # two untimed warm-ups
            x, y = data[k % len(data)]
            for p in model.parameters():
                p.grad = None
            start = time.perf_counter()
            F.cross_entropy(model(x[:shard].to(dev)), y[:shard].to(dev)).backward()
            synchronize_device(dev)
            whole = time.perf_counter() - start
            for p in model.parameters():
                p.grad = None
            t0 = time.perf_counter()
            xd, yd = x[:shard].to(dev), y[:shard].to(dev)
            synchronize_device(dev)
            t1 = time.perf_counter()
            loss = F.cross_entropy(model(xd), yd)
            synchronize_device(dev)
            t2 = time.perf_counter()
            loss.backward()
            synchronize_device(dev)
            t3 = time.perf_counter()
            if k >= 2:
                for name, t in (("pass", whole), ("copy", t1 - t0), ("forward", t2 - t1), ("backward", t3 - t2)):
                    runs[name].append(t)
    return {name: statistics.median(v) for name, v in runs.items()}


def measure(workload: str, target: str, other: str, shard: int, batch: int, reps: int, pin: bool,
            loads: list[str]) -> dict:
    dev = torch.device(target)
    torch.manual_seed(0)
    model = WORKLOADS[workload][0]().to(dev)
    data = _batches(workload, shard, 4, pin=pin)
    result = {"workload": workload, "target": target, "other": other, "shard": shard,
              "other_batch": batch, "pinned": pin, "loads": {}}
    idle = time_passes(model, dev, data, shard, reps)
    result["idle"] = idle
    for load in loads:
        bg = Background(load, workload, other, batch, pin)
        alone = bg.rate_alone(1.0)
        bg.start()
        try:
            busy = time_passes(model, dev, data, shard, reps)
        finally:
            beside = bg.stop()
        result["loads"][load] = {"target": busy, "target_slowdown": busy["pass"] / idle["pass"],
                                 "other_rate_alone": alone, "other_rate_beside": beside,
                                 "other_slowdown": alone / beside if beside > 0 else float("inf")}
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="the fl device whose passes are timed")
    p.add_argument("--other", required=True, help="the fl device the background loads run on")
    p.add_argument("--workload", default="wide", choices=sorted(WORKLOADS))
    p.add_argument("--shard", type=int, default=1024, help="rows of the target's timed pass")
    p.add_argument("--batch", type=int, default=0, help="the background's batch (0: the workload's default)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--loads", nargs="+", default=list(LOADS), choices=LOADS)
    p.add_argument("--pin", action="store_true", help="pinned host batches on both sides")
    p.add_argument("--json", default="")
    args = p.parse_args()
    batch = args.batch or WORKLOADS[args.workload][3]
    r = measure(args.workload, args.target, args.other, args.shard, batch, args.reps, args.pin, args.loads)
    print(f"{args.workload}: {args.target} passes of {args.shard} rows beside loads on {args.other} "
          f"(batch {batch}, {'pinned' if args.pin else 'pageable'}; torch threads {torch.get_num_threads()}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')})")
    def phases(t: dict) -> str:
        return ", ".join(f"{k} {t[k] * 1e3:.3f}" for k in ("copy", "forward", "backward"))

    print(f"  idle     {r['idle']['pass'] * 1e3:8.3f} ms a pass (phases apart, ms: {phases(r['idle'])})")
    for load, v in r["loads"].items():
        print(f"  {load:8s} {v['target']['pass'] * 1e3:8.3f} ms a pass ({v['target_slowdown']:.2f}x idle; "
              f"{phases(v['target'])}); {args.other} {v['other_rate_beside']:9.1f} it/s beside, "
              f"{v['other_rate_alone']:9.1f} alone ({v['other_slowdown']:.2f}x slower)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
