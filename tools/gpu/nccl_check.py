"""flccl's NCCL route on a machine with two or more CUDA-plugin devices: two ranks (processes)
run every collective check and the DDP training of tests/python/_flccl_worker.py, once on the
NCCL route and once host-staged (FL_CCL=gloo), then this script checks that

- each run's route is the one asked for (the worker asserts it);
- the two ranks hold bit-identical parameters after DDP training (with --mixed, ranks on two
  vendors' plugins, whose optimizer steps round differently: each within the bound, and the
  worker's resync check aligns them);
- those equal a single-process big-batch run on the last rank's device (the second GPU; with
  --mixed the CUDA one; float64, |diff| <= 1e-12, 1e-10 with --mixed), on both routes.

    python tools/gpu/nccl_check.py            # exit 0 when every check passes
    python tools/gpu/nccl_check.py --mixed    # one CPU-plugin rank and one CUDA-plugin rank
                                              # (host-staged, the route across vendors; one GPU)
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1] / "tests" / "python"
sys.path.insert(0, str(TESTS))

import torch_fl  # noqa: E402
import _flccl_worker as worker  # noqa: E402


def run_ranks(devices: list[int], route: str, workdir: Path) -> list[list[torch.Tensor]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["FL_WORKER_DEVICES"] = ",".join(str(d) for d in devices)
    env["FL_WORKER_ROUTE"] = route
    env["FL_CCL"] = route
    init = workdir / f"rendezvous-{route}"
    outs = [workdir / f"params-{route}-{r}.pt" for r in range(len(devices))]
    procs = [subprocess.Popen([sys.executable, str(TESTS / "_flccl_worker.py"), str(r), str(len(devices)),
                               str(init), "flccl", str(outs[r])],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(len(devices))]
    failed = False
    for r, p in enumerate(procs):
        log = p.communicate(timeout=300)[0]
        print(f"---- rank {r} ({route}), exit {p.returncode}\n{log}", flush=True)
        failed |= p.returncode != 0
    if failed:
        raise SystemExit(f"{route}: a rank failed")
    return [torch.load(o) for o in outs]


def reference(device: int) -> list[torch.Tensor]:
    dev = torch.device("fl", device)
    model = worker.make_model().to(dev)
    worker.train_steps(model, dev)
    return [p.detach().cpu() for p in model.parameters()]


def main() -> int:
    mixed = "--mixed" in sys.argv[1:]
    if mixed:  # rank 0 on the CPU plugin, rank 1 on the CUDA plugin
        devices = [d.index for d in torch_fl.devices("cpu")[:1] + torch_fl.devices("cuda")[:1]]
        routes = ("gloo",)
    else:
        devices = [d.index for d in torch_fl.devices("cuda")[:2]]
        routes = ("nccl", "gloo")
    print("rank devices:", [f"fl:{d}" for d in devices])
    if len(devices) < 2:
        print("needs " + ("a CPU-plugin and a CUDA-plugin device" if mixed else "two CUDA-plugin devices")
              + "; nothing run")
        return 1
    # The reference on the GPU rank's device; across vendors the two ranks' float64 products
    # round differently (OpenBLAS and cuBLAS), hence a looser bound there.
    expected = reference(devices[-1])
    bound = 1e-10 if mixed else 1e-12
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for route in routes:
            ranks = run_ranks(devices, route, Path(tmp))
            identical = all(torch.equal(a, b) for a, b in zip(*ranks))
            diffs = [max(float((g - e).abs().max()) for g, e in zip(params, expected)) for params in ranks]
            print(f"{route}: ranks bit-identical: {identical}; max |params - single-process big batch| per rank = "
                  + ", ".join(f"{d:.3e}" for d in diffs) + f" (bound {bound:.0e})")
            # Across vendors the ranks' optimizer steps round differently, so DDP's replicas may
            # differ in the last bits (the worker's "ok resync" checked that resync aligns them).
            ok &= (identical or mixed) and max(diffs) <= bound
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
