"""Heterogeneous data parallelism, measured: samples/s of each device alone, of the devices
together under torch_fl.parallel.HeteroDataParallel, and how much the per-device threads
overlap — side by side, for one or more workloads.

    python bench/hetero.py --devices fl:0 fl:1 --workloads mlp cnn
    FL_CPU_DEVICES=2 python bench/hetero.py            # here: two CPU-plugin devices

The issue's target: pair ≥ the fastest device alone, and pair ≥ 0.9 × the sum of the devices
alone. "Alone" is a plain training loop on that device (batch copied from the host each step,
forward, backward, optimizer step, loss read back), the same work HeteroDataParallel does per
step. Every number is the best of --repeats timed windows, the modes' windows taken in turn (a
shared host makes single runs noisy, and a drift should not favour whichever mode ran last). "Overlap" is sequential time / concurrent time for the same per-device share of the batch,
forward/backward, one thread per device (2.0 = perfect overlap of two, 1.0 = none).
"HeteroDataParallel on the fastest device only" is its cost per step over a plain loop.
When the devices are the same silicon (fl:0 and fl:1 of the CPU plugin share the host's
cores), the sum is not reachable and the target that matters is pair ≥ fastest alone.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import torch_fl  # noqa: E402
from torch_fl.parallel import HeteroDataParallel, device_context, step_timeline_summary, synchronize_device  # noqa: E402


# ---- workloads: (model factory, batch factory) -------------------------------------------


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def _cnn() -> nn.Module:
    from train_cnn import DigitsCNN
    return DigitsCNN()


def _convnet() -> nn.Module:
    """A CIFAR-sized conv net: ~1M parameters, ~0.3 GFLOP per sample for forward+backward, so
    a GPU step of a large batch is compute-bound rather than launch-bound."""
    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    return nn.Sequential(*block(3, 64, 1), *block(64, 128, 2), *block(128, 256, 2), *block(256, 256, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def _wide() -> nn.Module:
    """examples/wide_tabular.py's MLP on 2048 features: on a GPU, copying the batch from host
    memory bounds the step."""
    from wide_tabular import WideMLP
    return WideMLP()


WORKLOADS = {
    # name: (model factory, input shape per sample, classes, default batch)
    "mlp": (_mlp, (256,), 10, 512),
    "cnn": (_cnn, (1, 8, 8), 10, 256),
    "convnet": (_convnet, (3, 32, 32), 10, 1024),
    "wide": (_wide, (2048,), 10, 4096),
}


def _batches(workload: str, batch: int, count: int, seed: int = 0, pin: bool = False):
    _, shape, classes, _ = WORKLOADS[workload]
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(batch, *shape, generator=g), torch.randint(0, classes, (batch,), generator=g))
            for _ in range(count)]
    return [(x.pin_memory(), y.pin_memory()) for x, y in data] if pin else data


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


# ---- measurements ------------------------------------------------------------------------
# Every mode (each device alone, the devices together, HeteroDataParallel on the fastest only)
# is built once and then timed in windows taken in turn, repeat after repeat, and each mode's
# best window counts: a drift of the machine (clocks, a neighbour's load) then hits every mode
# alike instead of whichever ran last.


class PlainLoop:
    """A plain training loop on one device: batch copied from the host each step (with
    non_blocking=True, as one writes it for pinned batches on CUDA), forward, backward,
    optimizer step, loss read back."""

    def __init__(self, workload: str, device: str, data: list, warmup: int = 3):
        self.dev = torch.device(device)
        torch.manual_seed(0)
        self.model = WORKLOADS[workload][0]().to(self.dev)
        self.opt = _optimizer(self.model.parameters())
        self.data, self.k = data, 0
        with device_context(self.dev):
            for _ in range(warmup):
                self._step()
            synchronize_device(self.dev)

    def _step(self) -> None:
        x, y = self.data[self.k % len(self.data)]
        self.k += 1
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(x.to(self.dev, non_blocking=True)), y.to(self.dev, non_blocking=True))
        loss.backward()
        self.opt.step()
        float(loss.detach().cpu())

    def window(self, steps: int, max_seconds: float = 10.0) -> float:
        """Samples/s over `steps` steps (fewer when they take longer than `max_seconds`: a CPU
        device on a GPU-sized batch)."""
        batch = self.data[0][0].shape[0]
        timed = 0
        with device_context(self.dev):
            start = time.perf_counter()
            while timed < steps:
                self._step()
                timed += 1
                if timed >= 2 and time.perf_counter() - start > max_seconds:
                    break
            synchronize_device(self.dev)
        return timed * batch / (time.perf_counter() - start)


class PairLoop:
    """HeteroDataParallel over `devices`, after `warmup` steps that include its calibration."""

    def __init__(self, workload: str, devices: list[str], data: list, warmup: int = 8,
                 rebalance_every: int = 10, split: list[float] | None = None, host_zero_copy: bool = True,
                 reduce_device: str | None = None):
        torch.manual_seed(0)
        self.hdp = HeteroDataParallel(WORKLOADS[workload][0](), devices, _optimizer, rebalance_every=rebalance_every,
                                      split=split, host_zero_copy=host_zero_copy, reduce_device=reduce_device)
        self.data, self.k = data, 0
        self.shards: dict[tuple, int] = {}
        for _ in range(warmup):
            self._step()
        self.shards.clear()
        self.hdp.timeline = []  # where the timed steps of more than one device spend their time

    def _step(self) -> None:
        self.hdp.train_step(*self.data[self.k % len(self.data)], F.cross_entropy)
        self.k += 1
        key = tuple(self.hdp.last_shards)
        self.shards[key] = self.shards.get(key, 0) + 1

    def window(self, steps: int) -> float:
        batch = self.data[0][0].shape[0]
        start = time.perf_counter()
        for _ in range(steps):
            self._step()
        return steps * batch / (time.perf_counter() - start)

    def summary(self, best: float) -> dict:
        return {"samples_per_s": best, "shards": max(self.shards, key=self.shards.get),
                "shards_seen": {str(list(k)): v for k, v in sorted(self.shards.items(), key=lambda kv: -kv[1])},
                "balancer": self.hdp.balancer.state_dict(),
                "balancer_history": list(self.hdp.balancer.history),
                "timeline": step_timeline_summary(self.hdp.timeline or []),
                "calibration_points": self.hdp.calibration_points}

    def close(self) -> None:
        self.hdp.close()


def overlap(workload: str, devices: list[str], batch: int, reps: int = 5) -> float:
    """Sequential / concurrent time of one half-batch forward+backward per device."""
    models = []
    for d in devices:
        torch.manual_seed(0)
        models.append(WORKLOADS[workload][0]().to(d))
    half = _batches(workload, max(batch // len(devices), 1), 1)[0]

    def run(k: int) -> None:
        dev = torch.device(devices[k])
        with device_context(dev):
            x, y = half[0].to(dev), half[1].to(dev)
            F.cross_entropy(models[k](x), y).backward()
            synchronize_device(dev)

    for k in range(len(devices)):
        run(k)  # warm-up
    seq, conc = [], []
    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        for _ in range(reps):
            start = time.perf_counter()
            for k in range(len(devices)):
                run(k)
            seq.append(time.perf_counter() - start)
            start = time.perf_counter()
            list(pool.map(run, range(len(devices))))
            conc.append(time.perf_counter() - start)
    return min(seq) / min(conc)


SETTLE_SECONDS = 0.3


def measure(workload: str, devices: list[str], batch: int, steps: int, repeats: int, pin: bool = False,
            split: list[float] | None = None, host_zero_copy: bool = True, reduce_device: str | None = None) -> dict:
    """Best window of `repeats` for every mode, the modes' windows interleaved."""
    result = {"workload": workload, "batch": batch, "devices": devices, "repeats": repeats, "pinned": pin,
              "split": split, "host_zero_copy": host_zero_copy, "reduce_device": reduce_device, "alone": {}}
    data = _batches(workload, batch, 4, pin=pin)
    plain = {d: PlainLoop(workload, d, data) for d in devices}
    together = PairLoop(workload, devices, data, split=split, host_zero_copy=host_zero_copy,
                        reduce_device=reduce_device)
    single: PairLoop | None = None
    best = {"pair": 0.0, "single": 0.0, **{d: 0.0 for d in devices}}
    try:
        # A pause before every window, so that no device's spinning threads slow the next one
        # (OpenBLAS spins its threads about 0.1 s after a GEMM; without it the device timed
        # right after the CPU device measured up to 1.2x slower than later in the run).
        for _ in range(repeats):
            for d in devices:
                time.sleep(SETTLE_SECONDS)
                best[d] = max(best[d], plain[d].window(steps))
            time.sleep(SETTLE_SECONDS)
            best["pair"] = max(best["pair"], together.window(steps))
            if single is None:  # HeteroDataParallel's own cost: the fastest device, through it
                single = PairLoop(workload, [max(devices, key=lambda d: best[d])], data)
            time.sleep(SETTLE_SECONDS)
            best["single"] = max(best["single"], single.window(steps))
        result["alone"] = {d: best[d] for d in devices}
        result["pair"] = together.summary(best["pair"])
        result["hdp_fastest_only"] = best["single"]
    finally:
        together.close()
        if single is not None:
            single.close()
    del plain
    result["overlap"] = overlap(workload, devices, batch)
    fastest = max(result["alone"].values())
    total = sum(result["alone"].values())
    p = result["pair"]["samples_per_s"]
    result["pair_over_fastest"] = p / fastest
    result["pair_over_sum"] = p / total
    result["meets_fastest"] = p >= fastest
    result["meets_0.9_sum"] = p >= 0.9 * total
    return result


def _resolve_devices(names: list[str]) -> list[str]:
    """'fl:N' stays; a plugin name ('cuda', 'cpu') becomes that plugin's next unused device."""
    listed = torch_fl.list_devices()
    out: list[str] = []
    for name in names:
        if ":" in name or name == "cpu" and not any(d["plugin"] == "cpu" for d in listed):
            out.append(name)
            continue
        free = [d["device"] for d in listed if d["plugin"] == name and d["device"] not in out]
        if not free:
            raise SystemExit(f"no unused device of plugin {name!r} (devices: "
                             f"{[(d['device'], d['plugin']) for d in listed]})")
        out.append(free[0])
    return out


def _describe(device: str) -> str:
    if device.startswith("fl"):
        info = torch.fl.get_device_properties(device)
        return f"{device} ({info['plugin']}: {info['name']})"
    return device


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["fl:0", "fl:1"],
                   help="fl devices, or plugin names to take each plugin's first device from "
                        "(e.g. cpu cuda, or cuda cuda for two devices of one plugin)")
    p.add_argument("--workloads", nargs="+", default=["mlp", "cnn"], choices=sorted(WORKLOADS))
    p.add_argument("--batch-size", type=int, default=0, help="0: the workload's default")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="best of this many timed windows")
    p.add_argument("--pin", action="store_true",
                   help="pinned host batches (as a DataLoader with pin_memory=True gives)")
    p.add_argument("--split", nargs="+", type=float, default=None,
                   help="a fixed split for the pair (shard proportions per device) instead of the balancer's")
    p.add_argument("--host-copy", action="store_true",
                   help="HeteroDataParallel copies a host-memory device's shard (host_zero_copy=False) "
                        "instead of using the batch in place")
    p.add_argument("--reduce-device", default=None,
                   help="the pair's reduction device, one of --devices or its plugin's name (default: the "
                        "fastest in calibration; with --split, the first device)")
    p.add_argument("--json", default="")
    args = p.parse_args()

    names = list(args.devices)
    args.devices = _resolve_devices(args.devices)
    if args.reduce_device is not None and args.reduce_device not in args.devices:
        if args.reduce_device not in names:
            raise SystemExit(f"--reduce-device {args.reduce_device} is not one of --devices {names}")
        args.reduce_device = args.devices[names.index(args.reduce_device)]
    print("devices:", ", ".join(_describe(d) for d in args.devices),
          f"(FL_CPU_THREADS={os.environ.get('FL_CPU_THREADS', 'unset')})")
    results = []
    for w in args.workloads:
        batch = args.batch_size or WORKLOADS[w][3]
        r = measure(w, args.devices, batch, args.steps, args.repeats, args.pin, args.split,
                    host_zero_copy=not args.host_copy, reduce_device=args.reduce_device)
        results.append(r)
        alone_text = "  ".join(f"{d} {v:8.0f}" for d, v in r["alone"].items())
        print(f"\n{w} (batch {batch}): samples/s alone: {alone_text}")
        print(f"  pair {r['pair']['samples_per_s']:8.0f} samples/s, shards {list(r['pair']['shards'])} "
              f"(steps per split: {r['pair']['shards_seen']})")
        print(f"  pair / fastest alone = {r['pair_over_fastest']:.2f} "
              f"({'meets' if r['meets_fastest'] else 'misses'} >= 1.0); "
              f"pair / sum = {r['pair_over_sum']:.2f} ({'meets' if r['meets_0.9_sum'] else 'misses'} >= 0.9)")
        print(f"  thread overlap of the devices' forward/backward: {r['overlap']:.2f}x "
              f"({len(r['devices'])}.0 = perfect, 1.0 = serialised)")
        for split, marks in r["pair"]["timeline"].items():
            print(f"  step timeline of split {split} (ms from the step's start, mean): {marks}")
        print(f"  HeteroDataParallel on the fastest device only: {r['hdp_fastest_only']:8.0f} samples/s "
              f"({r['hdp_fastest_only'] / max(r['alone'].values()):.3f} x its plain loop)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
