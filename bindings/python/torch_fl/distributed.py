"""The "flccl" c10d backend: torch.distributed collectives on fl tensors.

    import torch_fl.distributed  # registers "flccl" (also done by torch_fl.lightning)
    dist.init_process_group("flccl", ...)              # or "cpu:gloo,fl:flccl"
    model = DDP(model.to(f"fl:{local_rank}"))

Registration maps the device type "fl" to "flccl" in
`torch.distributed.Backend.default_device_backend_map`, so `init_process_group()` without a
backend, and Lightning's DDP strategy, pick it for fl devices.

How it works: `FlProcessGroup` is a Python `torch.distributed.ProcessGroup` (c10d calls its
methods through the PyProcessGroup trampoline, which DistributedDataParallel's reducer uses for
its bucket all-reduces and its start-up `_broadcast_coalesced`/parameter-shape all-gather).
Every collective is *host-staged*: fl tensors are copied to contiguous host tensors, a Gloo
process group (created from the same store under the prefix "flccl-gloo/") runs the
collective, and the results are copied back. CPU tensors go to Gloo directly (no copy), so the
one group also serves `cpu` tensors and the object collectives (`broadcast_object_list`...):
c10d keeps a Python process group as the whole group, so with "cpu:gloo,fl:flccl" this group
replaces the Gloo backend c10d built for "cpu".

Device-direct route (NCCL): when every rank's current fl device (at group creation) is a
device of the CUDA plugin (with a CUDA build of torch; the HIP plugin with a ROCm build), torch
has NCCL and the ranks are on distinct GPUs, allreduce, broadcast, reduce, allgather,
all_gather_into_tensor and reduce_scatter(_tensor) on fl tensors run on NCCL, on the fl memory
and the fl device's current stream, with no host staging and no host wait
(`torch_fl._native_collectives`). The ranks decide together when the group is created (each
all-gathers every rank's answer, whatever its own FL_CCL says); `FL_CCL=gloo` forces host
staging, `FL_CCL=nccl` makes a group that cannot use NCCL an error naming why.
`FlProcessGroup.route` says which one runs. Gather, scatter, send, recv and barrier stay on
Gloo.

The two routes differ where their engines do:
- Gloo route: ReduceOp.PREMUL_SUM and the bitwise ops on fl tensors raise
  NotImplementedError; AVG is SUM followed by a division by the group size (floor division
  for integer tensors); bfloat16 is reduced in float32 on the host (Gloo has no bfloat16 sum)
  and rounded once to bfloat16 at the end, at least as accurate as a bfloat16 ring; so is
  float16 under AVG (its float16 sum would overflow at 65504 where the mean does not).
- NCCL route: NCCL's own semantics, as for cuda tensors: PREMUL_SUM works, the bitwise ops
  fail with NCCL's error, bfloat16 is summed in bfloat16 along the ring, integer AVG is
  NCCL's (sum, then truncating division).
So float results can differ in the last bits between a machine where the group runs NCCL and
one where it runs Gloo.

Ranks on different plugins (a CPU-plugin rank beside a CUDA one): the collectives are exact
(host-staged), and DistributedDataParallel's replicas stay equal only as long as every rank's
optimizer step rounds alike on the same averaged gradients. The CPU and CUDA plugins compute
the elementwise forms optimizers use the same way (add with alpha, addcmul, addcdiv and lerp as
one fused multiply-add, IEEE division and square root; tools/gpu/rounding_across_plugins.py):
on the H200 machine SGD with momentum, Adam and AdamW took bit-identical steps on the two, and
Lightning DDP over a CPU-plugin rank and a CUDA rank ended with identical parameters. Ops whose
kernels differ between vendors (exp: a third of float32 results differ between the two
plugins; matrix products) and plugin pairs not measured (HIP, Ascend) can still let replicas
drift apart in the last bits, step by step. `FlProcessGroup.rank_plugins` names each rank's
plugin; a group whose ranks use different plugins warns once, and `resync(model, optimizer)`
copies rank 0's parameters, buffers and optimizer state to every rank (in Lightning,
`torch_fl.lightning.ResyncReplicas`).

Not done (written here so that nobody relies on it):
- Host-staged collectives run synchronously: the returned Work is already complete, so
  async_op=True gives no overlap with computation, and DDP's all-reduce does not overlap
  backward. Send and receive are the exception: they do not wait for the peer, so an
  isend/irecv exchange (batch_isend_irecv) works; a receive's values reach the fl tensor when
  its work is waited for. On the NCCL route the host does not wait, but the Work is also returned complete
  (the fl stream is what waits).
- The NCCL route's Python costs about 70-200 us per call on the H200 machine (1 MiB
  all_reduce: 121-253 us against 48-58 for native NCCL).
"""
from __future__ import annotations

import atexit
import datetime
import hashlib
import os
import socket
import time
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from torch_fl._native_collectives import NativeCollectives, unavailable_reason

__all__ = ["BACKEND_NAME", "FlProcessGroup", "create_flccl_process_group", "register", "resync"]

BACKEND_NAME = "flccl"

_SUPPORTED_OPS = ("SUM", "AVG", "MIN", "MAX", "PRODUCT")


def _completed_work(result: Any) -> dist.Work:
    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


def _op_name(op: Any) -> str:
    for name in _SUPPORTED_OPS + ("PREMUL_SUM", "BAND", "BOR", "BXOR"):
        if op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


def _widened(dtype: torch.dtype, widen_half: bool = False) -> bool:
    """Whether host staging reduces `dtype` in float32: bfloat16 always (Gloo has no bfloat16
    sum), float16 when asked (an AVG: a float16 sum overflows at 65504 where the mean does not;
    NCCL's AVG premultiplies and does not overflow either)."""
    return dtype == torch.bfloat16 or (widen_half and dtype == torch.float16)


def _host_copy(t: torch.Tensor, widen_half: bool = False) -> torch.Tensor:
    """A new contiguous host tensor with t's values (bfloat16, and float16 if `widen_half`,
    widened to float32)."""
    return t.detach().to("cpu", torch.float32 if _widened(t.dtype, widen_half) else t.dtype,
                         copy=True).contiguous()


class _Staged:
    """Host copies of a collective's tensors; `finish()` copies results back to the originals."""

    def __init__(self) -> None:
        self._back: list[tuple[torch.Tensor, torch.Tensor]] = []

    def host(self, t: torch.Tensor, written: bool, widen_half: bool = False) -> torch.Tensor:
        """A contiguous host tensor with t's values; if `written`, copied back by finish()."""
        if t.device.type == "cpu" and t.is_contiguous() and not _widened(t.dtype, widen_half):
            return t
        staged = _host_copy(t, widen_half)
        if written:
            self._back.append((t, staged))
        return staged

    def finish(self) -> None:
        with torch.no_grad():
            for original, staged in self._back:
                original.copy_(staged)
        self._back.clear()


def _same_dtype(what: str, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
    """Gloo refuses outputs of another dtype than the inputs; host staging (bfloat16 widened to
    float32, results copied back with copy_) would cast them silently, so refuse them here."""
    dtypes = {t.dtype for t in list(outputs) + list(inputs)}
    if len(dtypes) > 1:
        raise TypeError(f"flccl {what}: every tensor must have one dtype, got "
                        f"{sorted(str(d) for d in dtypes)}")


class _StagedWork(dist.Work):
    """A Gloo work on host copies whose results are copied back to the fl tensors once it is
    waited for: an asynchronous receive that does not block the caller (isend/irecv pairs)."""

    def __init__(self, work: dist.Work, stage: _Staged, result: list[torch.Tensor]) -> None:
        super().__init__()
        self._work, self._stage, self._result, self._finished = work, stage, result, False

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if not self._finished:
            # c10d's C++ side passes 0 for "no timeout" (kNoTimeout).
            if timeout is None or timeout == datetime.timedelta(0):
                self._work.wait()
            else:
                self._work.wait(timeout)
            self._stage.finish()
            self._finished = True
        return True

    def is_completed(self) -> bool:
        return self._finished

    def is_success(self) -> bool:
        return self._finished

    def result(self) -> list[torch.Tensor]:
        return self._result

    def _source_rank(self) -> int:  # dist.recv() without src asks the work who sent
        return self._work._source_rank()


class FlProcessGroup(dist.ProcessGroup):
    """A c10d process group for fl (and cpu) tensors: host-staged over Gloo, or NCCL on the
    device when every rank is on a CUDA-plugin device (`route`)."""

    def __init__(self, store: dist.Store, rank: int, size: int,
                 timeout: datetime.timedelta = datetime.timedelta(minutes=30)):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("flccl-gloo/", store), rank, size, timeout)
        _let_gloo_finish_at_exit()
        # c10d asks the group for a per-device backend in places (init_process_group(device_id=
        # fl:N) checks `_get_backend(device_id).supports_splitting`; object collectives pick a
        # device from `_device_types`). The Gloo backend answers those queries; collectives
        # called on this group still run through the methods below.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._register_backend(torch.device("fl"), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)
        self._native, self.rank_plugins = self._agree_with_the_other_ranks(store, timeout)
        _warn_if_plugins_differ(self.rank_plugins)

    _PLUGIN_NAME_WORDS = 8  # a plugin's name travels in the vote as up to 64 bytes

    def _agree_with_the_other_ranks(self, store: dist.Store,
                                    timeout: datetime.timedelta) -> tuple[NativeCollectives | None, list[str]]:
        """One all-gather of every rank's facts at creation: whether it can use NCCL, its host
        and GPU ordinal, and the plugin of its current fl device ("" for a rank without fl
        devices). Returns the route for fl tensors, NCCL when every rank can use it (see the
        module's docstring), and each rank's plugin in rank order (`rank_plugins`). Every rank
        takes part in the vote, whatever its FL_CCL says, so that all of them decide alike; two
        ranks on one GPU (NCCL refuses that) also mean Gloo."""
        mode = os.environ.get("FL_CCL", "auto").strip().lower()
        valid = mode in ("auto", "gloo", "nccl")
        import torch_fl

        device = torch_fl._C.current_device() if torch_fl._C.device_count() > 0 else -1
        reason = unavailable_reason(device) if device >= 0 else "this process has no fl device"
        if not valid or mode == "gloo":
            reason = reason or f"FL_CCL={mode}"
        ordinal = torch_fl._C.native_device(device) if not reason else -1
        host = _short_hash(socket.gethostname())
        plugin = torch.fl.get_device_properties(device)["plugin"] if device >= 0 else ""
        name = torch.zeros(self._PLUGIN_NAME_WORDS * 8, dtype=torch.uint8)
        encoded = plugin.encode()[: name.numel()]
        name[: len(encoded)] = torch.tensor(list(encoded), dtype=torch.uint8)
        mine = torch.cat([torch.tensor([0 if reason else 1, host, ordinal], dtype=torch.int64), name.view(torch.int64)])
        votes = [torch.zeros_like(mine) for _ in range(self._size)]
        self._gloo.allgather([votes], [mine]).wait()
        rank_plugins = [bytes(v[3:].view(torch.uint8).tolist()).rstrip(b"\0").decode(errors="replace") for v in votes]
        if not valid:
            raise ValueError(f"FL_CCL={mode!r}: expected auto, gloo or nccl")
        able = all(int(v[0]) == 1 for v in votes)
        shared_gpu = len({(int(v[1]), int(v[2])) for v in votes}) < self._size
        if able and not shared_gpu:
            return NativeCollectives(store, self._rank, self._size, timeout, device), rank_plugins
        if mode == "nccl":
            why = (f"on this rank, {reason}" if reason else "another rank cannot" if not able
                   else "two ranks are on one GPU (set each rank's device with torch.fl.set_device)")
            raise RuntimeError(f"FL_CCL=nccl, but the group cannot use NCCL: {why}")
        return None, rank_plugins

    @property
    def route(self) -> str:
        """"nccl" when fl tensors take the device-direct route, else "gloo" (host-staged)."""
        return "nccl" if self._native is not None else "gloo"

    def _native_for(self, tensors: list[torch.Tensor]) -> NativeCollectives | None:
        if self._native is not None and tensors and all(t.device.type == "fl" for t in tensors):
            return self._native
        return None

    # -- identity

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return BACKEND_NAME

    def getRank(self) -> int:  # noqa: N802
        return self._rank

    def getSize(self) -> int:  # noqa: N802
        return self._size

    def __repr__(self) -> str:
        return f"FlProcessGroup(rank={self._rank}, size={self._size}, route={self.route})"

    # -- helpers

    def _gloo_op(self, op: Any, dtype: torch.dtype) -> Any:
        name = _op_name(op)
        if name not in _SUPPORTED_OPS:
            raise NotImplementedError(f"flccl: ReduceOp.{name} is not supported")
        return dist.ReduceOp.SUM if name == "AVG" else op

    def _finish_avg(self, op: Any, tensors: list[torch.Tensor]) -> None:
        if _op_name(op) != "AVG":
            return
        with torch.no_grad():
            for t in tensors:
                if t.is_floating_point() or t.is_complex():
                    t.div_(self._size)
                else:
                    t.floor_divide_(self._size)

    # -- collectives

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts if opts is not None else dist.AllreduceOptions()
        native = self._native_for(tensors)
        if native is not None:
            native.allreduce(tensors, opts)
            return _completed_work(tensors)
        stage = _Staged()
        avg = _op_name(opts.reduceOp) == "AVG"
        host = [stage.host(t, written=True, widen_half=avg) for t in tensors]
        gopts = dist.AllreduceOptions()
        gopts.reduceOp = self._gloo_op(opts.reduceOp, tensors[0].dtype)
        self._gloo.allreduce(host, gopts).wait()
        self._finish_avg(opts.reduceOp, host)
        stage.finish()
        return _completed_work(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for t in tensors:
            ar = dist.AllreduceOptions()
            ar.reduceOp = op
            self.allreduce([t], ar)
        return _completed_work(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts if opts is not None else dist.BroadcastOptions()
        native = self._native_for(tensors)
        if native is not None:
            native.broadcast(tensors, opts)
            return _completed_work(tensors)
        stage = _Staged()
        host = [stage.host(t, written=True) for t in tensors]
        gopts = dist.BroadcastOptions()
        gopts.rootRank = opts.rootRank
        gopts.rootTensor = opts.rootTensor
        self._gloo.broadcast(host, gopts).wait()
        stage.finish()
        return _completed_work(tensors)

    def allgather(self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor],
                  opts: Any = None) -> dist.Work:
        outputs = [t for outs in output_tensors for t in outs]
        _same_dtype("all_gather", outputs, input_tensors)
        native = self._native_for(outputs + list(input_tensors))
        if native is not None:
            native.allgather(output_tensors, input_tensors)
            return _completed_work(output_tensors)
        stage = _Staged()
        host_out = [[stage.host(t, written=True) for t in outs] for outs in output_tensors]
        host_in = [stage.host(t, written=False) for t in input_tensors]
        self._gloo.allgather(host_out, host_in).wait()
        stage.finish()
        return _completed_work(output_tensors)

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor],
                            opts: Any = None) -> dist.Work:
        """output_lists[r][j] receives rank r's input_list[j]."""
        if len(output_lists) != self._size:
            raise ValueError(f"flccl all_gather_coalesced: {len(output_lists)} output lists, expected one per "
                             f"rank ({self._size})")
        for j, t in enumerate(input_list):
            self.allgather([[outs[j] for outs in output_lists]], [t])
        return _completed_work(output_lists)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        """all_gather_into_tensor: `output` holds every rank's `input`, rank by rank."""
        _same_dtype("all_gather_into_tensor", [output], [input])
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"flccl all_gather_into_tensor: output has {output.numel()} elements, "
                             f"expected {input.numel()} x {self._size}")
        native = self._native_for([output, input])
        if native is not None:
            native.all_gather_single(output, input)
            return _completed_work([output])
        host_in = _host_copy(input).reshape(-1)
        host_out = torch.empty(self._size * host_in.numel(), dtype=host_in.dtype)
        self._gloo.allgather([list(host_out.chunk(self._size))], [host_in]).wait()
        with torch.no_grad():
            output.copy_(host_out.view(output.shape))
        return _completed_work([output])

    _allgather_base = all_gather_single  # the name before torch 2.12

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> dist.Work:
        for o, i in zip(outputs, inputs):
            self.all_gather_single(o, i)
        return _completed_work(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, output_tensors: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                       opts: Any = None) -> dist.Work:
        """output[r] = reduce over ranks of input_list[r]; done as an all-reduce of the stacked
        inputs (Gloo's reduce_scatter does not take every dtype), keeping this rank's slice."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        inputs = [t for ins in input_lists for t in ins]
        _same_dtype("reduce_scatter", output_tensors, inputs)
        native = self._native_for(list(output_tensors) + inputs)
        if native is not None:
            native.reduce_scatter(output_tensors, input_lists, opts if opts is not None else dist.ReduceScatterOptions())
            return _completed_work(output_tensors)
        for out, inputs in zip(output_tensors, input_lists):
            stacked = torch.stack([_host_copy(t) for t in inputs])
            ar = dist.AllreduceOptions()
            ar.reduceOp = op
            self.allreduce([stacked], ar)
            with torch.no_grad():
                out.copy_(stacked[self._rank])
        return _completed_work(output_tensors)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        """reduce_scatter_tensor: this rank's 1/size of the reduced `input` into `output`."""
        _same_dtype("reduce_scatter_tensor", [output], [input])
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"flccl reduce_scatter_tensor: input has {input.numel()} elements, "
                             f"expected {output.numel()} x {self._size}")
        native = self._native_for([output, input])
        if native is not None:
            native.reduce_scatter_single(output, input, opts if opts is not None else dist.ReduceScatterOptions())
            return _completed_work([output])
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        host = _host_copy(input)
        ar = dist.AllreduceOptions()
        ar.reduceOp = op
        self.allreduce([host], ar)
        with torch.no_grad():
            output.copy_(host.reshape(self._size, -1)[self._rank].view(output.shape))
        return _completed_work([output])

    _reduce_scatter_base = reduce_scatter_single  # the name before torch 2.12

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> dist.Work:
        for o, i in zip(outputs, inputs):
            self.reduce_scatter_single(o, i, opts)
        return _completed_work(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts if opts is not None else dist.ReduceOptions()
        native = self._native_for(tensors)
        if native is not None:
            native.reduce(tensors, opts)
            return _completed_work(tensors)
        stage = _Staged()
        avg = _op_name(opts.reduceOp) == "AVG"
        host = [stage.host(t, written=True, widen_half=avg) for t in tensors]
        gopts = dist.ReduceOptions()
        gopts.reduceOp = self._gloo_op(opts.reduceOp, tensors[0].dtype)
        gopts.rootRank = opts.rootRank
        gopts.rootTensor = opts.rootTensor
        self._gloo.reduce(host, gopts).wait()
        if self._rank == opts.rootRank:
            self._finish_avg(opts.reduceOp, host)
            stage.finish()
        return _completed_work(tensors)

    def gather(self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor],
               opts: Any = None) -> dist.Work:
        opts = opts if opts is not None else dist.GatherOptions()
        _same_dtype("gather", [t for outs in output_tensors for t in outs], input_tensors)
        stage = _Staged()
        host_out = [[stage.host(t, written=True) for t in outs] for outs in output_tensors]
        host_in = [stage.host(t, written=False) for t in input_tensors]
        gopts = dist.GatherOptions()
        gopts.rootRank = opts.rootRank
        self._gloo.gather(host_out, host_in, gopts).wait()
        stage.finish()
        return _completed_work(output_tensors)

    def scatter(self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]],
                opts: Any = None) -> dist.Work:
        opts = opts if opts is not None else dist.ScatterOptions()
        _same_dtype("scatter", output_tensors, [t for ins in input_tensors for t in ins])
        stage = _Staged()
        host_out = [stage.host(t, written=True) for t in output_tensors]
        host_in = [[stage.host(t, written=False) for t in ins] for ins in input_tensors]
        gopts = dist.ScatterOptions()
        gopts.rootRank = opts.rootRank
        self._gloo.scatter(host_out, host_in, gopts).wait()
        stage.finish()
        return _completed_work(output_tensors)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> dist.Work:
        """Does not wait for the peer (isend): Gloo's work keeps the host copy alive."""
        stage = _Staged()
        return self._gloo.send([stage.host(t, written=False) for t in tensors], dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> dist.Work:
        """Does not wait for the peer (irecv): the values reach `tensors` when the work is
        waited for, as a device's receive completes on its stream."""
        stage = _Staged()
        work = self._gloo.recv([stage.host(t, written=True) for t in tensors], src, tag)
        return _StagedWork(work, stage, tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> dist.Work:
        stage = _Staged()
        work = self._gloo.recv_anysource([stage.host(t, written=True) for t in tensors], tag)
        return _StagedWork(work, stage, tensors)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any = None) -> dist.Work:
        """all_to_all_single: rows of `input` split by input_split_sizes (even when empty) go
        to the ranks in order; `output` receives each rank's part, split by output_split_sizes."""
        _same_dtype("all_to_all_single", [output], [input])
        stage = _Staged()
        host_out = stage.host(output, written=True)
        host_in = stage.host(input, written=False)
        self._gloo.alltoall_base(host_out, host_in, list(output_split_sizes), list(input_split_sizes)).wait()
        stage.finish()
        return _completed_work([output])

    def alltoall(self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor],
                 opts: Any = None) -> dist.Work:
        """all_to_all: input_tensors[r] goes to rank r, output_tensors[r] comes from rank r (any
        shapes, one dtype): one all_to_all_single of the flattened tensors."""
        if len(output_tensors) != self._size or len(input_tensors) != self._size:
            raise ValueError(f"flccl all_to_all: {len(input_tensors)} inputs and {len(output_tensors)} outputs, "
                             f"expected one per rank ({self._size})")
        _same_dtype("all_to_all", output_tensors, input_tensors)
        out_sizes = [t.numel() for t in output_tensors]
        host_in = torch.cat([_host_copy(t).reshape(-1) for t in input_tensors])
        host_out = torch.empty(sum(out_sizes), dtype=host_in.dtype)
        self._gloo.alltoall_base(host_out, host_in, out_sizes, [t.numel() for t in input_tensors]).wait()
        with torch.no_grad():
            for t, part in zip(output_tensors, host_out.split(out_sizes)):
                t.copy_(part.view(t.shape))
        return _completed_work(output_tensors)

    def barrier(self, opts: Any = None) -> dist.Work:
        self._gloo.barrier(dist.BarrierOptions()).wait()
        return _completed_work(None)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        self._gloo.barrier(dist.BarrierOptions()).wait()


_warned_mixed_plugins = False


def _warn_if_plugins_differ(rank_plugins: list[str]) -> None:
    """Warns once per process when the ranks compute on different plugins (see the module's
    docstring: replicated models drift in the last bits)."""
    global _warned_mixed_plugins
    if _warned_mixed_plugins or len({p for p in rank_plugins if p}) < 2:
        return
    _warned_mixed_plugins = True
    ranks = ", ".join(f"rank {r}: {p or 'no fl device'}" for r, p in enumerate(rank_plugins))
    warnings.warn(f"flccl: the ranks compute on different plugins ({ranks}). Where their kernels round differently "
                  "(see torch_fl.distributed's documentation), a model replicated on every rank "
                  "(DistributedDataParallel) drifts apart in the last bits as it steps. "
                  "torch_fl.distributed.resync(model, optimizer) copies rank 0's parameters, buffers and optimizer "
                  "state to every rank; call it every few hundred steps (in Lightning: the callback "
                  "torch_fl.lightning.ResyncReplicas).", UserWarning, stacklevel=3)


_RESYNC_BUCKET_BYTES = 64 * 1024 * 1024


def _layout_digest(tensors: list[torch.Tensor]) -> int:
    """A number that two ranks share exactly when their tensors match in order, device type,
    dtype and shape (what resync's broadcasts assume)."""
    return _short_hash(";".join(f"{t.device.type},{t.dtype},{tuple(t.shape)}" for t in tensors))


def _short_hash(text: str) -> int:
    """56 bits of text's SHA-1: a non-negative int64, as the groups' all-gathers carry it."""
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:7], "little")


def resync(module: torch.nn.Module,
           optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None, src: int = 0,
           group: dist.ProcessGroup | None = None) -> None:
    """Copies rank `src`'s parameters and buffers of `module` (a DistributedDataParallel is
    unwrapped), and with `optimizer` (one or a list) its state tensors (momentum, Adam's
    moments, steps), to every rank of `group` (default: the world), in place, so that replicas
    that drifted apart in the last bits (ranks on different plugins; see the module's
    docstring) hold rank `src`'s bits again. `src` is a global rank, as in dist.broadcast; a
    rank outside `group` returns at once. Every rank of the group must call it at the same
    point; their tensors must match in order, device type, dtype and shape (the same model and
    optimizer, each with its state created), else it raises a RuntimeError on every rank
    before copying anything. Tensors are broadcast in buckets (as DistributedDataParallel's
    start-up does), per device type."""
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        module = module.module
    group = group if group is not None else dist.group.WORLD
    if group is not dist.group.WORLD:
        if dist.get_rank() not in dist.get_process_group_ranks(group):
            return
        group_src = dist.get_group_rank(group, src)
    else:
        group_src = src
    tensors = [t.detach() for t in module.parameters()] + [b.detach() for b in module.buffers()]
    optimizers = [] if optimizer is None else [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else optimizer
    for optimizer in optimizers:
        for param_group in optimizer.param_groups:
            for p in param_group["params"]:
                state = optimizer.state.get(p, {})
                tensors.extend(state[k].detach() for k in sorted(state) if isinstance(state[k], torch.Tensor))
    # Which broadcasts run, and their sizes, follow each rank's own tensors: ranks whose
    # layouts differ would block or exchange mismatched buffers. Compare first.
    mine = torch.tensor([_layout_digest(tensors)], dtype=torch.int64)
    digests = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(digests, mine, group=group)
    if any(not torch.equal(d, digests[0]) for d in digests):
        differing = [r for r, d in enumerate(digests) if not torch.equal(d, digests[group_src])]
        raise RuntimeError(f"resync: the ranks' tensors differ in number, order, device type, dtype or shape "
                           f"(group ranks {differing} differ from the source's): every rank needs the same model "
                           "and optimizer, on the same kind of device, with its state created (after a first "
                           "step); nothing was copied")
    by_type: dict[str, list[torch.Tensor]] = {}
    for t in tensors:
        by_type.setdefault(t.device.type, []).append(t)
    for device_type in sorted(by_type):
        dist._broadcast_coalesced(group, by_type[device_type], _RESYNC_BUCKET_BYTES, group_src)


# Gloo's worker threads release each finished collective's work a moment after the caller's
# wait() returns, and with it the host tensors of that collective. When Python has dropped those
# tensors already, that release takes the GIL; if the interpreter has begun to finalize by then,
# the thread is made to exit inside a noexcept destructor and the process dies with "terminate
# called without an active exception" (SIGABRT), after the script has finished. Seen here in 1
# of 12 two-rank runs of tests/python/_flccl_worker.py, its last all_gather released by
# ProcessGroupGloo::runLoop (~AsyncAllgatherWork -> TensorImpl::decref_pyobject -> take_gil ->
# PyThread_exit_thread); upstream, pytorch/pytorch#190489 (plain gloo without
# destroy_process_group) and the abandoned #179291. c10d's destroy_process_group cannot help:
# Gloo's shutdown() does nothing. So a process that made an flccl group gives Gloo's threads
# a moment at exit, before the interpreter finalizes, with the GIL released.
_GLOO_EXIT_GRACE_S = 0.1
_gloo_exit_registered = False


def _let_gloo_finish_at_exit() -> None:
    global _gloo_exit_registered
    if not _gloo_exit_registered:
        atexit.register(time.sleep, _GLOO_EXIT_GRACE_S)
        _gloo_exit_registered = True


def create_flccl_process_group(store: dist.Store, rank: int, size: int,
                               timeout: datetime.timedelta) -> FlProcessGroup:
    """The creator c10d calls for backend "flccl" (non-extended API)."""
    return FlProcessGroup(store, rank, size, timeout)


_registered = False


def register(creator: Callable = create_flccl_process_group) -> None:
    """Registers "flccl" for device type "fl" (idempotent)."""
    global _registered
    if _registered or BACKEND_NAME.upper() in dist.Backend._plugins:
        _registered = True
        return
    dist.Backend.register_backend(BACKEND_NAME, creator, devices=["fl"])
    _registered = True


register()
