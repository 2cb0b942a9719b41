"""Device-direct collectives for flccl: NCCL on the memory and streams of CUDA-plugin devices.

When every rank of a group trains on a device of the CUDA plugin, staging each collective
through host memory costs two PCIe copies and a host round trip. This route runs NCCL (through
torch's own ProcessGroupNCCL) on the fl tensors themselves:

- the CUDA plugin answers the ABI's "fl.native_device" and "fl.native_stream" extras
  (fl_abi.h, get_proc_address): the CUDA ordinal behind an fl device and the cudaStream_t
  behind an fl stream;
- an fl tensor's memory is a cudaMalloc pointer of that ordinal (the plugin and torch share
  the device's primary context), so a CUDA tensor aliasing it is made through
  `__cuda_array_interface__`, without a copy;
- the collective is issued with the fl device's current stream as torch's current CUDA stream
  (`torch.cuda.ExternalStream`), so NCCL starts after the work already queued on it. A
  blocking call (`opts.asyncOp` False) runs NCCL on that stream itself; an async one runs it
  on NCCL's stream, and `work.wait()` makes the fl stream wait for it. Either way later fl
  work on the stream sees the result and the host never blocks (as with a CUDA tensor on
  ProcessGroupNCCL).

Requirements, checked by `unavailable_reason`: torch built with CUDA and NCCL, and the device's
plugin offering both extras. A group uses this route only when every rank can
(FlProcessGroup decides at creation, from the current fl device of each rank).
"""
from __future__ import annotations

import datetime
import threading
from collections import OrderedDict
from typing import Any, Callable

import torch
import torch.distributed as dist

__all__ = ["NativeCollectives", "unavailable_reason"]


# The plugins whose extras name a runtime torch's GPU build can drive, and that build's marker.
_RUNTIME_OF_PLUGIN = {"cuda": ("CUDA", lambda: torch.version.cuda), "hip": ("ROCm", lambda: torch.version.hip)}


def unavailable_reason(device_index: int) -> str:
    """Why fl:`device_index` cannot use NCCL ("" when it can): its plugin must be one whose
    runtime this torch build drives (the CUDA plugin with a CUDA build, the HIP plugin with a
    ROCm build, whose NCCL is RCCL), offer fl.native_device and fl.native_stream, and torch
    must have NCCL and see a GPU."""
    from torch_fl import _C

    plugin = _C.list_devices()[device_index]["plugin"]
    if plugin not in _RUNTIME_OF_PLUGIN:
        return f"fl:{device_index} is a device of the {plugin} plugin (NCCL runs on the cuda and hip plugins' devices)"
    runtime, version = _RUNTIME_OF_PLUGIN[plugin]
    if version() is None:
        return f"fl:{device_index} is a {plugin}-plugin device, but this torch build has no {runtime}"
    if not dist.is_nccl_available():
        return "this torch build has no NCCL"
    if not torch.cuda.is_available():
        return "torch sees no GPU"
    if _C.native_device(device_index) is None or _C.native_stream(device_index, 0) is None:
        return f"fl:{device_index}'s plugin ({plugin}) does not offer fl.native_device and fl.native_stream"
    return ""


class _CudaArray:
    """`nbytes` bytes at `pointer`, as __cuda_array_interface__ describes them (no copy)."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 2}


class NativeCollectives:
    """ProcessGroupNCCL over one CUDA-plugin fl device per rank."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta, device_index: int):
        from torch_fl import _C

        self._C = _C
        self.device = torch.device("fl", device_index)
        self.ordinal = int(_C.native_device(device_index))
        self.cuda_device = torch.device("cuda", self.ordinal)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        options.is_high_priority_stream = False
        self.group = dist.ProcessGroupNCCL(dist.PrefixStore("flccl-nccl/", store), rank, size, options)
        self._streams: dict[int, torch.cuda.ExternalStream] = {}
        # CUDA views of fl memory by (address, dtype, shape): a view owns nothing, so one made
        # for a freed block is still right for whatever tensor lies there next. DDP all-reduces
        # the same buckets every step; rebuilding the view cost more than a small all-reduce.
        self._aliases: OrderedDict[tuple, torch.Tensor] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()  # DDP's reducer may call from the autograd engine's threads

    def __repr__(self) -> str:
        return f"NativeCollectives(NCCL on {self.device} = {self.cuda_device})"

    # -- tensors and streams

    def _check(self, t: torch.Tensor) -> None:
        if t.device != self.device:
            raise ValueError(f"flccl (NCCL route): a tensor on {t.device}, but this rank's group runs on "
                             f"{self.device} (call torch.fl.set_device before init_process_group, or set "
                             f"FL_CCL=gloo for host-staged collectives)")

    def _alias(self, t: torch.Tensor) -> torch.Tensor:
        """A CUDA tensor over t's memory (t contiguous, on self.device)."""
        if t.numel() == 0:
            return torch.empty(t.shape, dtype=t.dtype, device=self.cuda_device)
        key = (t.data_ptr(), t.dtype, t.shape)
        with self._lock:
            alias = self._aliases.get(key)
            if alias is not None:
                self._aliases.move_to_end(key)
                return alias
        raw = torch.as_tensor(_CudaArray(t.data_ptr(), t.numel() * t.element_size()), device=self.cuda_device)
        alias = raw.view(t.dtype).view(t.shape)
        with self._lock:
            self._aliases[key] = alias
            if len(self._aliases) > 512:
                self._aliases.popitem(last=False)
        return alias

    def _stream(self) -> torch.cuda.ExternalStream:
        stream_id = torch.fl.current_stream(self.device.index).stream_id
        handle = int(self._C.native_stream(self.device.index, stream_id))
        with self._lock:
            stream = self._streams.get(handle)
            if stream is None:
                stream = torch.cuda.ExternalStream(handle, device=self.cuda_device)
                self._streams[handle] = stream
        return stream

    def run(self, collective: Callable[..., dist.Work], written: list[torch.Tensor],
            read: list[torch.Tensor], shape: Callable[[list[torch.Tensor], list[torch.Tensor]], tuple]) -> None:
        """Runs `collective(*shape(written_aliases, read_aliases))` on the current fl stream.
        Non-contiguous tensors go through contiguous fl temporaries (written ones are copied
        back, on the same stream)."""
        for t in written + read:
            self._check(t)
        staged_written = [t if t.is_contiguous() else t.contiguous() for t in written]
        staged_read = [t if t.is_contiguous() else t.contiguous() for t in read]
        with torch.cuda.device(self.ordinal), torch.cuda.stream(self._stream()):
            work = collective(*shape([self._alias(t) for t in staged_written],
                                     [self._alias(t) for t in staged_read]))
            # opts.asyncOp False (a blocking call): NCCL ran on the current stream, the fl
            # stream itself, and torch returns no Work. True: it ran on NCCL's own stream, and
            # wait() makes the current stream wait for it; the host does not block either way.
            if work is not None:
                work.wait()
        with torch.no_grad():
            for original, staged in zip(written, staged_written):
                if staged is not original:
                    original.copy_(staged)

    # -- the collectives flccl routes here

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> None:
        self.run(self.group.allreduce, tensors, [], lambda w, r: (w, opts))

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> None:
        self.run(self.group.broadcast, tensors, [], lambda w, r: (w, opts))

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> None:
        self.run(self.group.reduce, tensors, [], lambda w, r: (w, opts))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor]) -> None:
        counts = [len(outs) for outs in outputs]
        self.run(self.group.allgather, [t for outs in outputs for t in outs], inputs,
                 lambda w, r: (_regroup(w, counts), r))

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor) -> None:
        self.run(self.group._allgather_base, [output], [input], lambda w, r: (w[0], r[0]))

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> None:
        self.run(self.group._reduce_scatter_base, [output], [input], lambda w, r: (w[0], r[0], opts))

    def reduce_scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any) -> None:
        counts = [len(ins) for ins in input_lists]
        self.run(self.group.reduce_scatter, outputs, [t for ins in input_lists for t in ins],
                 lambda w, r: (w, _regroup(r, counts), opts))


def _regroup(flat: list[torch.Tensor], counts: list[int]) -> list[list[torch.Tensor]]:
    """`flat` cut back into lists of `counts` tensors each."""
    lists, k = [], 0
    for n in counts:
        lists.append(flat[k:k + n])
        k += n
    return lists
