"""torch_fl._C.device_view_of_host: an fl tensor that uses a host tensor's memory in place, on a
device whose plugin takes host pointers (the CPU plugin sets fl_device_properties.
host_pointers_usable); HeteroDataParallel feeds such devices this way."""
from __future__ import annotations

import gc

import pytest
import torch

import torch_fl


def test_the_cpu_plugin_takes_host_pointers():
    assert torch.fl.get_device_properties("fl:0")["host_pointers_usable"] is True


def test_a_view_shares_memory_sizes_and_strides_with_the_host_tensor():
    host = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    part = host[1:3, ::2]  # an offset, non-contiguous view
    view = torch_fl._C.device_view_of_host(part, 0)
    assert view.device == torch.device("fl:0")
    assert view.shape == part.shape and view.stride() == part.stride() and view.dtype == part.dtype
    assert view.data_ptr() == part.data_ptr()
    torch.testing.assert_close((view * 2).cpu(), part * 2, rtol=0, atol=0)
    host[1, 0] = -7.0  # a host write is seen through the view
    assert view.cpu()[0, 0].item() == -7.0
    view.add_(1.0)  # a device write lands in the host tensor
    torch.fl.synchronize()
    torch.testing.assert_close(part, torch.tensor([[-6.0, 9.0, 11.0], [13.0, 15.0, 17.0]]), rtol=0, atol=0)


def test_a_view_keeps_the_host_memory_alive():
    host = torch.full((1000,), 3.0)
    view = torch_fl._C.device_view_of_host(host, 0)
    del host
    gc.collect()
    torch.randn(1000)  # host memory freed above would likely be handed out again here
    assert view.sum().item() == 3000.0


def test_dropping_a_view_waits_for_the_work_queued_on_it():
    # The products below are queued on fl:0's stream; the view and its host tensor are dropped
    # right after. The view's deleter waits for the stream before the host memory goes back,
    # so the queued work still reads the 1s and the result is exact.
    n = 512
    host = torch.ones(n, n)
    view = torch_fl._C.device_view_of_host(host, 0)
    acc = view
    for _ in range(4):
        acc = acc @ view
    expected = float(n) ** 4 * n * n
    del host, view
    gc.collect()
    torch.randn(n, n).fill_(0.0)  # reuses freed host memory if any was given back early
    assert acc.sum().item() == expected


def test_an_empty_tensor_gives_an_empty_view():
    view = torch_fl._C.device_view_of_host(torch.empty(0, 5), 0)
    assert view.device == torch.device("fl:0") and view.shape == (0, 5)


def test_a_tensor_not_on_the_host_is_refused():
    with pytest.raises(RuntimeError, match="not cpu"):
        torch_fl._C.device_view_of_host(torch.ones(3).to("fl:0"), 0)
