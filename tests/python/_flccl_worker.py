"""One rank of the flccl tests (run by test_distributed.py as a separate process):

    python _flccl_worker.py RANK WORLD INIT_FILE BACKEND OUT
    (FL_WORKER_DEVICES="1,2" picks each rank's fl device; FL_WORKER_ROUTE=gloo|nccl asserts
    the group's route: tools/gpu/nccl_check.py runs it on CUDA-plugin devices)

Checks every collective on fl tensors against values computed from the rank numbers (an
AssertionError exits non-zero), then trains a float64 MLP with DistributedDataParallel on
fl:RANK for a few steps on this rank's half of each global batch and saves the parameters to
OUT. Data and model come from fixed seeds, so test_distributed.py can recompute the
single-process big-batch run."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("FL_CPU_DEVICES", "2")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_fl  # noqa: E402,F401
import torch_fl.distributed  # noqa: E402,F401

STEPS = 4
GLOBAL_BATCH = 32


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 3)).to(torch.float64)


def make_data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(GLOBAL_BATCH, 10, generator=g, dtype=torch.float64),
             torch.randint(0, 3, (GLOBAL_BATCH,), generator=g)) for _ in range(STEPS)]


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def check(name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    actual = actual.cpu()
    assert actual.dtype == expected.dtype, (name, actual.dtype, expected.dtype)
    assert torch.equal(actual, expected), f"{name}: got {actual}, expected {expected}"
    print(f"ok {name}", flush=True)


def check_collectives(rank: int, world: int, dev: torch.device) -> None:
    ranks = torch.arange(world, dtype=torch.float32) + 1  # rank r contributes r + 1
    for op, expected in [(dist.ReduceOp.SUM, ranks.sum()), (dist.ReduceOp.AVG, ranks.mean()),
                         (dist.ReduceOp.MIN, ranks.min()), (dist.ReduceOp.MAX, ranks.max()),
                         (dist.ReduceOp.PRODUCT, ranks.prod())]:
        t = torch.full((5,), float(rank + 1), device=dev)
        dist.all_reduce(t, op=op)
        assert t.device == dev
        check(f"all_reduce {op}", t, torch.full((5,), float(expected)))
    t = torch.full((3,), rank + 1, dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)  # integers: floor of the mean
    check("all_reduce AVG int64", t, torch.full((3,), int(ranks.sum()) // world, dtype=torch.int64))
    t = torch.full((4,), 0.5 * (rank + 1), dtype=torch.bfloat16, device=dev)
    dist.all_reduce(t)
    check("all_reduce bfloat16", t, torch.full((4,), 0.5 * float(ranks.sum()), dtype=torch.bfloat16))
    # float16 AVG of values whose float16 sum overflows (65504) but whose mean does not.
    t = torch.full((4,), 40000.0 + 32 * rank, dtype=torch.float16, device=dev)  # 32: float16's step there
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check("all_reduce AVG float16", t, torch.full((4,), 40000.0 + 16 * (world - 1), dtype=torch.float16))
    t = torch.full((2 * world,), 40000.0, dtype=torch.float16, device=dev)
    out = torch.empty(2, dtype=torch.float16, device=dev)
    dist.reduce_scatter_tensor(out, t, op=dist.ReduceOp.AVG)
    check("reduce_scatter_tensor AVG float16", out, torch.full((2,), 40000.0, dtype=torch.float16))

    t = torch.full((2, 3), float(10 * rank), device=dev)
    dist.broadcast(t, src=world - 1)
    check("broadcast", t, torch.full((2, 3), float(10 * (world - 1))))

    outs = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), float(rank), device=dev))
    for r, o in enumerate(outs):
        check(f"all_gather[{r}]", o, torch.full((2,), float(r)))

    out = torch.empty(world * 3, device=dev)
    dist.all_gather_into_tensor(out, torch.arange(3, dtype=torch.float32, device=dev) + 100 * rank)
    check("all_gather_into_tensor", out,
          torch.cat([torch.arange(3, dtype=torch.float32) + 100 * r for r in range(world)]))

    inputs = [torch.full((2,), float(10 * rank + r), device=dev) for r in range(world)]
    out = torch.empty(2, device=dev)
    dist.reduce_scatter(out, inputs)
    check("reduce_scatter", out, torch.full((2,), float(sum(10 * q + rank for q in range(world)))))

    out = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(out, torch.arange(2 * world, dtype=torch.float32, device=dev) + rank,
                               op=dist.ReduceOp.MAX)
    check("reduce_scatter_tensor MAX", out, torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + world - 1)

    t = torch.full((2,), float(rank + 1), device=dev)
    dist.reduce(t, dst=0)
    if rank == 0:
        check("reduce", t, torch.full((2,), float(ranks.sum())))

    dist.barrier()
    print("ok barrier", flush=True)

    objects = [{"from": rank}]
    dist.broadcast_object_list(objects, src=0)
    assert objects == [{"from": 0}], objects
    print("ok broadcast_object_list", flush=True)

    cpu = torch.full((2,), float(rank + 1))  # cpu tensors go through the same group
    dist.all_reduce(cpu)
    check("all_reduce cpu", cpu, torch.full((2,), float(ranks.sum())))

    # c10d reduces complex tensors through view_as_real, which must write through to the tensor.
    z = torch.full((2,), complex(rank + 1, 10 * (rank + 1)), dtype=torch.complex64, device=dev)
    dist.all_reduce(z)
    total = float(ranks.sum())
    check("all_reduce complex64", z, torch.full((2,), complex(total, 10 * total), dtype=torch.complex64))

    # A ring exchange with isend/irecv in one batch: every rank sends before it receives, so a
    # send that waited for its peer would deadlock.
    right, left = (rank + 1) % world, (rank - 1) % world
    sent = torch.full((3,), float(rank + 1), device=dev)
    got = torch.zeros(3, device=dev)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, right), dist.P2POp(dist.irecv, got, left)]):
        work.wait()
    check("batch_isend_irecv", got, torch.full((3,), float(left + 1)))

    # A receive from any rank says who sent.
    if rank == 0:
        dist.send(torch.full((2,), 7.0, device=dev), dst=world - 1)
    elif rank == world - 1:
        anyone = torch.zeros(2, device=dev)
        sender = dist.recv(anyone)
        assert sender == 0, sender
        check("recv from any rank", anyone, torch.full((2,), 7.0))

    # all_gather_coalesced: outputs[r][j] is rank r's j-th input (tensors of two shapes).
    inputs = [torch.full((2,), float(rank), device=dev), torch.full((3,), 10.0 + rank, device=dev)]
    outputs = [[torch.zeros(2, device=dev), torch.zeros(3, device=dev)] for _ in range(world)]
    dist.all_gather_coalesced(outputs, inputs)
    for r in range(world):
        check(f"all_gather_coalesced[{r}][0]", outputs[r][0], torch.full((2,), float(r)))
        check(f"all_gather_coalesced[{r}][1]", outputs[r][1], torch.full((3,), 10.0 + r))

    # all_to_all_single, even and uneven splits (rank r sends q + 1 rows to rank q), and the
    # list form with a bfloat16 tensor per peer.
    source = torch.arange(2 * world, dtype=torch.float32, device=dev) + 100 * rank
    even = torch.empty(2 * world, device=dev)
    dist.all_to_all_single(even, source)
    check("all_to_all_single", even, torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * q
                                                 for q in range(world)]))
    in_splits = [q + 1 for q in range(world)]
    uneven_in = torch.full((sum(in_splits), 2), float(rank), device=dev)
    uneven_out = torch.empty(world * (rank + 1), 2, device=dev)
    dist.all_to_all_single(uneven_out, uneven_in, output_split_sizes=[rank + 1] * world, input_split_sizes=in_splits)
    check("all_to_all_single uneven", uneven_out,
          torch.cat([torch.full((rank + 1, 2), float(q)) for q in range(world)]))
    ins = [torch.full((q + 1,), float(10 * rank + q), dtype=torch.bfloat16, device=dev) for q in range(world)]
    outs = [torch.empty(rank + 1, dtype=torch.bfloat16, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for q in range(world):
        check(f"all_to_all[{q}]", outs[q], torch.full((rank + 1,), float(10 * q + rank), dtype=torch.bfloat16))

    # Outputs of another dtype than the inputs are refused (Gloo's rule), not cast.
    try:
        dist.all_gather_into_tensor(torch.zeros(2 * world, device=dev),
                                    torch.tensor([rank, 2**25 + 1], dtype=torch.int64, device=dev))
    except TypeError as e:
        assert "one dtype" in str(e), e
        print("ok dtype mismatch refused", flush=True)
    else:
        raise AssertionError("all_gather_into_tensor cast int64 into float32")


def train_steps(module: nn.Module, dev: torch.device, rank: int = 0, world: int = 1) -> None:
    """The STEPS training steps of `module` (a model, or its DistributedDataParallel) on rank
    `rank`'s share of each global batch; with world == 1 the whole batch, as the single-process
    reference runs (test_distributed.py, tools/gpu/nccl_check.py)."""
    opt = make_optimizer(module.parameters())
    shard = GLOBAL_BATCH // world
    for x, y in make_data():
        xs, ys = x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard]
        opt.zero_grad()
        F.cross_entropy(module(xs.to(dev)), ys.to(dev)).backward()
        opt.step()


def train_ddp(rank: int, world: int, dev: torch.device, out: str) -> None:
    model = make_model().to(dev)
    if rank != 0:  # DDP must broadcast rank 0's parameters at start
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    train_steps(nn.parallel.DistributedDataParallel(model), dev, rank, world)
    torch.save([p.detach().cpu() for p in model.parameters()], out)
    print("ok ddp", flush=True)


def make_batch_norm_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3)).to(torch.float64)


def train_sync_batch_norm(rank: int, world: int, dev: torch.device, out: str) -> None:
    """DDP with torch.nn.SyncBatchNorm: the batch statistics are those of the whole global batch
    (its ops run through the binding's generic kernels), so parameters and running statistics
    must equal a single-process BatchNorm run on the whole batch; saved to OUT + ".bn"."""
    model = nn.SyncBatchNorm.convert_sync_batchnorm(make_batch_norm_model()).to(dev)
    train_steps(nn.parallel.DistributedDataParallel(model), dev, rank, world)
    torch.save([t.detach().cpu() for t in list(model.parameters()) + list(model.buffers())], out + ".bn")
    print("ok sync batch norm", flush=True)


def check_resync(rank: int, world: int, dev: torch.device) -> None:
    """Replicas (and SGD momentum) that drifted apart by a rank-dependent amount, as on ranks of
    different plugins, hold rank 0's bits again after torch_fl.distributed.resync."""
    model = make_model().to(dev)
    opt = make_optimizer(model.parameters())
    x, y = make_data()[0]
    F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
    opt.step()  # the momentum buffers exist now
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank * 1e-6)
            opt.state[p]["momentum_buffer"].add_(rank * 1e-6)

    def flat() -> torch.Tensor:
        params = list(model.parameters())
        return torch.cat([p.detach().cpu().flatten() for p in params]
                         + [opt.state[p]["momentum_buffer"].cpu().flatten() for p in params])

    before = flat()
    torch_fl.distributed.resync(nn.parallel.DistributedDataParallel(model), opt)
    after = flat()
    gathered = [torch.zeros_like(after) for _ in range(world)]
    dist.all_gather(gathered, after)
    assert all(torch.equal(g, gathered[0]) for g in gathered), "resync left the ranks different"
    assert torch.equal(after, before) == (rank == 0), "resync must keep rank 0's bits and replace the others'"
    print("ok resync", flush=True)


def main() -> None:
    rank, world, init_file, backend, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    # FL_WORKER_DEVICES="1,2": rank r trains on the r-th listed fl device (default: fl:rank).
    listed = os.environ.get("FL_WORKER_DEVICES")
    index = int(listed.split(",")[rank]) if listed else rank % torch.fl.device_count()
    dev = torch.device("fl", index)
    torch.fl.set_device(dev.index)  # before the group: it picks its route from this device
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    assert dist.get_backend() in ("flccl", backend), dist.get_backend()
    route = getattr(dist.group.WORLD, "route", None)
    print(f"route {route} on {dev}", flush=True)
    expected_route = os.environ.get("FL_WORKER_ROUTE")
    assert expected_route is None or route == expected_route, (route, expected_route)
    check_collectives(rank, world, dev)
    train_ddp(rank, world, dev, out)
    train_sync_batch_norm(rank, world, dev, out)
    check_resync(rank, world, dev)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
