"""Trains one model on two devices of different plugins at once — on a GPU machine the CUDA
plugin's device and the CPU plugin's device; here (FL_CPU_DEVICES=2) fl:0 and fl:1 of the
CPU plugin — with torch_fl.parallel.HeteroDataParallel, and compares its throughput with each
device training alone.

    python examples/hetero_train.py                         # fl:0 + fl:1, the digits CNN
    python examples/hetero_train.py --devices fl:0 fl:1 --epochs 3 --batch-size 256
    python examples/hetero_train.py --model wide            # a wide tabular MLP

Two models: `digits`, a small CNN on 8x8 handwritten digits (on a GPU its step is bounded by
kernel launches, not by the batch: a split cannot shorten it), and `wide`, an MLP on 2048
host-resident features per row (wide_tabular.py; on a GPU its step is bounded by copying the
batch from host memory, so a CPU device computing on its share of the rows adds throughput).

It prints which plugin drives each device, then per epoch the shard sizes the balancer chose,
the loss and the samples/s of the pair, then the samples/s of each device alone (a plain
training loop of the same model, timed in windows of one epoch's steps between the pair's
epochs, so that a drift of the machine hits both alike; every window and epoch starts after a
0.3 s pause, so that no device's spinning threads slow the next), and finally the test accuracy and
the issue's two targets: pair ≥ the fastest device alone, and pair ≥ 0.9 × the sum of the
devices alone (the pair counted over every epoch after the calibration epoch, probes
included). Last, how far that verdict stands above the machine's noise: each epoch of the pair
divided by the fastest device's window timed right after it (median, range, how many ≥ 1.0),
and the range of that device's windows; then how many shards the master computed in a late
device's place (HeteroDataParallel's backup_late_shards). With --history FILE it writes every
step (shards, times, what the host did during it: host_counters.py) and each epoch's /proc
counters (steal time, compaction, each thread's CPU time), and prints the steps over 1.5 x
their shards' median beside those counters.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_fl  # noqa: E402
from torch_fl.parallel import HeteroDataParallel, device_context, synchronize_device  # noqa: E402
from host_counters import HostCounters  # noqa: E402
from train_cnn import DigitsCNN, load_data  # noqa: E402
from wide_tabular import WideMLP, load_wide_data  # noqa: E402

# name: (model factory, data loader (seed) -> ((x_train, y_train), (x_test, y_test)), default batch)
MODELS = {
    "digits": (DigitsCNN, load_data, 128),
    "wide": (WideMLP, load_wide_data, 4096),
}


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int):
    for i in range(0, len(x) - batch_size + 1, batch_size):  # full batches only
        yield x[i:i + batch_size], y[i:i + batch_size]


def slow_step_lines(steps: list[dict], epoch_hosts: list[dict], factor: float = 1.5) -> list[str]:
    """The steps after the calibration epoch that took over `factor` × the median of the steps
    with the same shards, each with what the host did during it (HostCounters, getrusage's part)
    beside the median of those steps, and what the kernel did during its epoch (`epoch_hosts`,
    /proc's part): a stall by garbage collection shows gc ms, one by the kernel's memory
    management system ms, faults or compaction stalls, one by oversubscription involuntary
    switches or runnable threads."""
    keys = ("user_ms", "system_ms", "minor_faults", "involuntary_switches")
    epoch_keys = ("compact_stall", "pgscan_direct", "thp_fault_alloc", "runnable", "steal_ms")
    by_shards: dict[tuple, list[dict]] = {}
    for s in steps:
        if s["epoch"] > 1:
            by_shards.setdefault(tuple(s["shards"]), []).append(s)

    def describe(values: dict, names: tuple[str, ...] = keys) -> str:
        return ", ".join(f"{k} {values[k]:g}" for k in names if values.get(k) is not None)

    lines = []
    for shards, group in by_shards.items():
        median_seconds = statistics.median(s["seconds"] for s in group)
        slow = [s for s in group if s["seconds"] > factor * median_seconds]
        if not slow:
            continue
        typical = {k: statistics.median(s["host"][k] for s in group)
                   for k in keys if all(s["host"][k] is not None for s in group)}
        lines.append(f"slow steps of shards {list(shards)} (median {1e3 * median_seconds:.1f} ms over {len(group)}; "
                     f"their median host: {describe(typical)}):")
        for s in slow:
            device_ms = " / ".join("-" if d is None else f"{1e3 * d:.1f}" for d in s["device_seconds"])
            epoch = describe(epoch_hosts[s["epoch"] - 1], epoch_keys) if len(epoch_hosts) >= s["epoch"] else ""
            lines.append(f"  epoch {s['epoch']}: {1e3 * s['seconds']:.1f} ms (devices {device_ms} ms), "
                         f"gc {s['gc_ms']:.1f} ms, {describe(s['host'])}" + (f"; its epoch: {epoch}" if epoch else ""))
    if not lines:
        lines.append(f"slow steps: none over {factor} x the median of their shards")
        return lines
    # Each epoch after the calibration: which threads ran (user / system / runnable-but-waiting ms);
    # an epoch with a stall beside one without.
    for e, host in enumerate(epoch_hosts[1:], start=2):
        threads = host.get("threads") or []
        top = " ".join(f"{name}[{tid}] {u:g}/{sy:g}/{w:g}" for tid, name, u, sy, w in threads[:8])
        lines.append(f"epoch {e} threads (ms user/system/waiting; {len(threads)} ran, system {sum(t[3] for t in threads):g} "
                     f"waiting {sum(t[4] for t in threads):g} in all): {top}")
    return lines


def settle() -> None:
    """Pauses before a timed window, so that the threads of whatever ran last are asleep: after
    its last GEMM OpenBLAS spins its threads for about 0.1 s, which would slow the copy threads
    of the device timed next."""
    time.sleep(0.3)


class AloneLoop:
    """The same training as a plain loop on one device (batch from the host with
    non_blocking=True, as one writes it for pinned batches on CUDA, forward, backward,
    optimizer step, loss read back), timed in windows that main() takes between the pair's
    epochs, so that both are measured under the same conditions."""

    def __init__(self, device: str, make_model, x: torch.Tensor, y: torch.Tensor, batch_size: int, lr: float):
        self.dev = torch.device(device)
        torch.manual_seed(0)
        self.model = make_model().to(self.dev)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.data = list(batches(x, y, batch_size))
        self.k, self.samples, self.seconds = 0, 0, 0.0
        self.windows: list[float] = []  # samples/s of each window, in order
        with device_context(self.dev):
            self._step()
            self._step()
            synchronize_device(self.dev)

    def _step(self) -> int:
        xb, yb = self.data[self.k % len(self.data)]
        self.k += 1
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(xb.to(self.dev, non_blocking=True)), yb.to(self.dev, non_blocking=True))
        loss.backward()
        self.opt.step()
        float(loss.detach().cpu())
        return len(xb)

    def window(self, steps: int) -> None:
        settle()
        with device_context(self.dev):
            start = time.perf_counter()
            samples = sum(self._step() for _ in range(steps))
            synchronize_device(self.dev)
            seconds = time.perf_counter() - start
            self.seconds += seconds
            self.samples += samples
            self.windows.append(samples / seconds)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["fl:0", "fl:1"])
    p.add_argument("--model", choices=sorted(MODELS), default="digits")
    p.add_argument("--samples", type=int, default=0,
                   help="rows of the wide model's data set (0: wide_tabular's default, 131072)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=0, help="0: the model's default (digits 128, wide 4096)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--pin", action="store_true",
                   help="keep the training rows in pinned host memory (as DataLoader(pin_memory=True) gives)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rebalance-every", type=int, default=10)
    p.add_argument("--ema", type=float, default=0.3,
                   help="HeteroDataParallel's weight of the newest step in its records (a smaller one "
                        "lets one slow step move a record less)")
    p.add_argument("--tail-window", type=int, default=32,
                   help="HeteroDataParallel's tail_window: recent steps whose slowest device shapes the split "
                        "when a device's speed varies (0: split at each device's typical speed)")
    p.add_argument("--history", default="",
                   help="write every step (epoch, shards, wall seconds, the balancer's records after it) and "
                        "each device's alone windows to this JSON file, to see why a split ran or did not")
    p.add_argument("--granularity", type=int, default=0,
                   help="shard sizes are multiples of this (0: HeteroDataParallel's default, the largest "
                        "power of two up to batch/16); finer lets a small device's shard come closer to its share")
    p.add_argument("--split", nargs="+", type=float, default=None,
                   help="a fixed split instead of the balancer: one proportion per device (the device with "
                        "the largest reduces); to measure what a split gives, against what the balancer chooses")
    p.add_argument("--no-backup", action="store_true",
                   help="HeteroDataParallel(backup_late_shards=False): a step waits for a late shard instead of "
                        "the master computing it (to measure what the backups give)")
    args = p.parse_args()

    for d in args.devices:
        info = torch.fl.get_device_properties(d)
        name = info["name"] if info["name"].startswith(info["vendor"]) else f"{info['vendor']} {info['name']}"
        print(f"{d}: plugin {info['plugin']} — {name}")
    make_model, load, default_batch = MODELS[args.model]
    if args.samples and args.model != "wide":
        raise SystemExit("--samples applies to --model wide only")
    if args.batch_size < 0 or args.samples < 0 or args.granularity < 0:
        raise SystemExit("--batch-size, --samples and --granularity must not be negative")
    if args.split is not None and len(args.split) != len(args.devices):
        raise SystemExit(f"--split needs one proportion per device ({len(args.devices)}), got {len(args.split)}")
    if args.epochs < 2:
        raise SystemExit(f"--epochs {args.epochs}: at least 2 are needed, the first epoch includes the "
                         "calibration and only the later ones are compared with each device alone")
    args.batch_size = args.batch_size or default_batch
    if args.model == "wide" and args.samples:
        (xtr, ytr), (xte, yte) = load_wide_data(args.seed, samples=args.samples)
    else:
        (xtr, ytr), (xte, yte) = load(args.seed)
    if args.pin:
        xtr, ytr = xtr.pin_memory(), ytr.pin_memory()
    steps_per_epoch = len(xtr) // args.batch_size
    if steps_per_epoch < 1:
        raise SystemExit(f"--batch-size {args.batch_size} exceeds the {len(xtr)} training rows")
    print(f"model {args.model}: {len(xtr)} training rows of {tuple(xtr.shape[1:])}, batch {args.batch_size}, "
          f"{steps_per_epoch} steps per epoch{', pinned' if args.pin else ''}")

    alone_loops = {d: AloneLoop(d, make_model, xtr, ytr, args.batch_size, args.lr) for d in args.devices}

    torch.manual_seed(args.seed)
    # A fixed split is not calibrated, so nothing would move the reduction to the fastest
    # device: the one with the largest share reduces.
    reduce_device = None if args.split is None else args.devices[max(range(len(args.split)), key=args.split.__getitem__)]
    hdp = HeteroDataParallel(make_model(), args.devices, lambda params: torch.optim.Adam(params, lr=args.lr),
                             rebalance_every=args.rebalance_every, granularity=args.granularity or None,
                             ema=args.ema, split=args.split, reduce_device=reduce_device,
                             tail_window=args.tail_window, backup_late_shards=not args.no_backup)
    if args.split is not None:
        print(f"fixed split {args.split} (no balancer), gradients reduced on {hdp.reduce_device}")
    steps: list[dict] = []  # --history: every step of the pair
    epoch_hosts: list[dict] = []  # --history: what the host did during each epoch of the pair
    # Python's full (generation 2) garbage collections: each walks every tracked object (about
    # 166k with torch imported; 35-140 ms each on the 2-core CI machine) with the GIL held,
    # which would stall the threads that drive the devices. Each step records the milliseconds
    # of those that began during it (the H200's single CPU-device stalls of 21-82 ms: are
    # they these?). In CPU-only runs here none fell during the pair's steps.
    full_collections: list[tuple[float, float]] = []  # (start, milliseconds)
    collection_start: list[float] = []

    def on_collection(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            collection_start[:] = [time.perf_counter()]
        elif collection_start:
            full_collections.append((collection_start[0], 1e3 * (time.perf_counter() - collection_start[0])))

    gc.callbacks.append(on_collection)
    pair_samples, pair_seconds = 0, 0.0
    pair_epochs: list[float] = []  # samples/s of each epoch after the calibration
    for epoch in range(args.epochs):
        losses, shards, samples = [], {}, 0
        settle()
        epoch_before = HostCounters.read(proc=True) if args.history else None  # (outside the timed steps)
        start = time.perf_counter()
        for xb, yb in batches(xtr, ytr, args.batch_size):
            counters_before = HostCounters.read() if args.history else None
            step_start = time.perf_counter()
            losses.append(hdp.train_step(xb, yb, F.cross_entropy))
            step_seconds = time.perf_counter() - step_start
            host = HostCounters.read().since(counters_before) if args.history else None
            gc_ms = sum(ms for t, ms in full_collections if step_start <= t < step_start + step_seconds)
            shards[tuple(hdp.last_shards)] = shards.get(tuple(hdp.last_shards), 0) + 1
            samples += len(xb)
            if args.history:
                # device_seconds: each device's forward/backward of its shard (None where not timed),
                # to tell which device a slow step waited for.
                steps.append({"epoch": epoch + 1, "shards": list(hdp.last_shards), "seconds": step_seconds,
                              "device_seconds": list(hdp.last_device_seconds), "gc_ms": gc_ms, "host": host,
                              "backups": hdp.backups,
                              "records": dict(hdp.balancer.measured)})
        seconds = time.perf_counter() - start
        if args.history:
            epoch_hosts.append(HostCounters.read(proc=True).since(epoch_before))
        rate = samples / seconds
        if epoch > 0:  # the first epoch includes calibration
            pair_samples += samples
            pair_seconds += seconds
            pair_epochs.append(rate)
            for loop in alone_loops.values():  # each device alone, as many steps, in turn
                loop.window(steps_per_epoch)
        split = ", ".join(f"{list(s)} x{n}" for s, n in sorted(shards.items(), key=lambda kv: -kv[1]))
        print(f"epoch {epoch + 1}: loss {sum(losses) / len(losses):.4f}, {rate:8.0f} samples/s, "
              f"shards ({' / '.join(args.devices)}): {split}")

    with torch.no_grad():
        pred = hdp(xte.to(hdp.reduce_device)).argmax(dim=1).cpu()
    accuracy = (pred == yte).float().mean().item()
    hdp.close()
    # Every step after the calibration epoch counts, probes and re-balances included.
    pair = pair_samples / pair_seconds if pair_seconds > 0 else rate
    alone = {d: loop.samples_per_s for d, loop in alone_loops.items()}
    for d, v in alone.items():
        print(f"{d} alone: {v:8.0f} samples/s (plain loop, timed between the epochs)")
    fastest, total = max(alone.values()), sum(alone.values())
    print(f"test accuracy {accuracy:.4f}")
    print(f"pair {pair:.0f} samples/s (all epochs after calibration) = {pair / fastest:.2f} x fastest alone "
          f"({'meets' if pair >= fastest else 'misses'} >= 1.0), {pair / total:.2f} x sum "
          f"({'meets' if pair >= 0.9 * total else 'misses'} >= 0.9)")
    # How far the verdict stands above the noise: each epoch of the pair against the fastest
    # device's window timed right after it (same steps, same conditions).
    best = max(alone, key=alone.get)
    windows = alone_loops[best].windows
    ratios = [p / a for p, a in zip(pair_epochs, windows)]
    if ratios:
        print(f"per epoch, pair / {best} alone in the window after it: median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} epochs, >= 1.0 in "
              f"{sum(r >= 1.0 for r in ratios)}; {best} alone's windows ranged {min(windows):.0f}-{max(windows):.0f} samples/s")
    # What the balancer measured for each device set it ran: why it kept the split it kept.
    records = sorted(hdp.balancer.measured.items(), key=lambda kv: kv[1])
    names = lambda key: " + ".join(args.devices[int(i)] for i in key.split(","))  # noqa: E731
    print("time per sample on record (µs; whole steps, or the calibration for a set that never ran): "
          + ", ".join(f"{names(k)} {v * 1e6:.2f}" for k, v in records))
    print("balancer:", {k: v for k, v in hdp.balancer.state_dict().items()
                        if k in ("overhead", "per_sample", "transfer", "slowdown", "measured")})
    print(f"backups: {hdp.backups} shards computed by the master in a late device's place"
          if hdp.backup_late_shards else "backups: off (--no-backup)")
    gc.callbacks.remove(on_collection)
    print(f"full garbage collections: {len(full_collections)}, "
          f"{' '.join(f'{ms:.1f}' for _, ms in full_collections) or 'none'} ms, during the pair's steps: "
          f"{sum(s['gc_ms'] > 0 for s in steps) if args.history else 'see --history'}")
    if args.history:
        for line in slow_step_lines(steps, epoch_hosts):
            print(line)
    print(torch_fl.fallback_report().splitlines()[-1])
    if args.history:
        with open(args.history, "w") as f:
            json.dump({"args": vars(args), "steps": steps, "epoch_hosts": epoch_hosts,
                       "alone_windows": {d: loop.windows for d, loop in alone_loops.items()},
                       "balancer_history": list(hdp.balancer.history)}, f)
        print(f"history: {len(steps)} steps written to {args.history}")


if __name__ == "__main__":
    main()
