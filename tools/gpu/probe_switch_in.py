"""Whether a device that sat steps out costs its first step back: HeteroDataParallel on the
wide MLP (bench/hetero.py's) with a fixed split that alternates between the pair and the
fastest device alone, each step timed on the host; the median step time per position after a
switch says whether the first pair step after a run of steps alone (what every balancer probe
of the pair is) is slower than the pair's steps that follow it.

    FL_PLUGIN_PATH=libfl_cuda.so:libfl_cpu.so FL_CPU_THREADS=12 python tools/gpu/probe_switch_in.py

Without --devices: the first CPU-plugin device and the first CUDA-plugin device (the latter
reduces). Prints the median step per phase and position (for the pair, with its timeline
marks), the first step against the later ones, each phase's mean, median, p90 and max, and up to
six steps slower than 1.1 x the median; --json writes every step.
"""
from __future__ import annotations

import argparse
import gc
import json
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import torch_fl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from hetero import WORKLOADS, _batches, _optimizer  # noqa: E402  (bench/hetero.py)

from torch_fl.parallel import HeteroDataParallel  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs=2, default=None, help="the slow device, then the fast one (it reduces)")
    p.add_argument("--batch-size", type=int, default=65536)
    p.add_argument("--split", nargs=2, type=float, default=[1, 15], help="the pair's proportions")
    p.add_argument("--run", type=int, default=6, help="steps per phase before switching")
    p.add_argument("--cycles", type=int, default=12)
    p.add_argument("--pin", action="store_true", help="batches in pinned host memory")
    p.add_argument("--no-gc", action="store_true",
                   help="Python's cyclic garbage collector off during the timed cycles (gc.freeze, gc.disable)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    slow, fast = args.devices or [str(torch_fl.devices("cpu")[0]), str(torch_fl.devices("cuda")[0])]
    data = _batches("wide", args.batch_size, 4, pin=args.pin)
    torch.manual_seed(0)
    pair, alone = list(args.split), [0.0, 1.0]
    hdp = HeteroDataParallel(WORKLOADS["wide"][0](), [slow, fast], _optimizer, reduce_device=fast, split=pair)
    hdp.timeline = []
    k = 0

    def step(split: list[float]) -> dict:
        nonlocal k
        hdp.fixed_split = split
        x, y = data[k % len(data)]
        k += 1
        marks_before = len(hdp.timeline)
        start = time.perf_counter()
        hdp.train_step(x, y, F.cross_entropy)
        seconds = time.perf_counter() - start
        row = {"phase": "pair" if split is pair else "alone", "ms": seconds * 1e3, "shards": list(hdp.last_shards)}
        if len(hdp.timeline) > marks_before:
            last = hdp.timeline[-1]
            row.update({f"dev{i}_{m}": v * 1e3 for i, marks in last["devices"].items() for m, v in marks.items()})
            row.update({m: last[m] * 1e3 for m in ("joined", "reduced", "optimizer", "total")})
        return row

    # Warm: allocator blocks, cuDNN/cuBLAS plans, pinned blocks. It ends with the pair, so the
    # first timed step alone follows a switch as every later one does.
    for split in (alone, pair, alone, pair):
        for _ in range(args.run):
            step(split)
    if args.no_gc:
        gc.collect()
        gc.freeze()
        gc.disable()
    rows = []
    for cycle in range(args.cycles):
        for split in (alone, pair):
            for position in range(args.run):
                row = step(split)
                row.update({"cycle": cycle, "position": position})
                rows.append(row)
    hdp.close()
    if args.no_gc:
        gc.enable()
        gc.unfreeze()

    print(f"devices {slow} (slow) + {fast} (fast, reduces); batch {args.batch_size}, pair split {pair}, "
          f"{'pinned' if args.pin else 'pageable'} rows; {args.cycles} cycles of {args.run} steps alone "
          f"then {args.run} steps of the pair; garbage collector {'off' if args.no_gc else 'on'}; "
          f"median ms per step by position after the switch:")
    for phase in ("alone", "pair"):
        medians = []
        for position in range(args.run):
            mine = [r for r in rows if r["phase"] == phase and r["position"] == position]
            medians.append(statistics.median(r["ms"] for r in mine))
            extra = ""
            if phase == "pair":
                keys = sorted({key for r in mine for key in r if key.startswith("dev")})
                keys += [key for key in ("joined", "optimizer") if any(key in r for r in mine)]
                extra = "  " + " ".join(f"{key} {statistics.median(r[key] for r in mine if key in r):.2f}"
                                        for key in keys)
            print(f"  {phase:5s} step {position + 1}: {medians[-1]:7.2f} ms{extra}")
        later = statistics.median(medians[1:]) if len(medians) > 1 else medians[0]
        print(f"  {phase}: first step {medians[0]:.2f} ms, the later steps' median {later:.2f} ms "
              f"(first / later = {medians[0] / later:.2f})")
    for phase in ("alone", "pair"):
        ms = sorted(r["ms"] for r in rows if r["phase"] == phase)
        late = [r for r in rows if r["phase"] == phase and r["ms"] > 1.1 * statistics.median(ms)]
        print(f"  {phase}: mean {statistics.mean(ms):.2f} ms, median {statistics.median(ms):.2f}, "
              f"p90 {ms[int(0.9 * (len(ms) - 1))]:.2f}, max {ms[-1]:.2f}; {len(late)} of {len(ms)} steps > 1.1 x median")
        for r in late[:6]:
            after = r["ms"] - r.get("optimizer", r["ms"])
            print(f"    {r['ms']:.2f} ms" + ("" if "optimizer" not in r else
                  f": joined {r['joined']:.2f}, optimizer stepped {r['optimizer']:.2f}, {after:.2f} after it"))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
