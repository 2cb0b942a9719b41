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


def test_dropping_a_view_does_not_wait_for_the_device_and_releases_the_memory_later():
    stream = torch.fl.current_stream(0)
    n = 1536
    view = torch_fl._C.device_view_of_host(torch.ones(n, n), 0)
    acc = view
    for _ in range(8):  # 56 GFLOP of queued products: a good fraction of a second here
        acc = acc @ view
    del view  # the last reference: the storage dies here
    assert not stream.query()  # the drop queued an event instead of waiting for the stream
    assert torch_fl._C.release_finished_host_views() >= 1  # still held: the products read it
    torch.fl.synchronize()
    assert torch_fl._C.release_finished_host_views() == 0
    assert acc[0, 0].item() == pytest.approx(float(n) ** 8, rel=1e-6)  # ones, times n per product


def test_dropping_a_view_leaves_a_device_error_for_the_next_synchronize():
    a = torch.ones(3, device="fl:0")
    torch.index_select(a, 0, torch.tensor([7], device="fl:0"))  # fails on the stream
    view = torch_fl._C.device_view_of_host(torch.ones(8), 0)
    del view
    gc.collect()
    with pytest.raises(RuntimeError, match="index"):
        torch.fl.synchronize()


def test_tensors_a_view_would_misread_are_refused():
    with pytest.raises(RuntimeError, match="requires grad"):
        torch_fl._C.device_view_of_host(torch.ones(3, requires_grad=True), 0)
    conj_imag = torch.randn(4, dtype=torch.cfloat).conj().imag  # a lazy negation
    assert conj_imag.is_neg()
    with pytest.raises(RuntimeError, match="negation or conjugation"):
        torch_fl._C.device_view_of_host(conj_imag, 0)


def test_a_view_cannot_be_resized_away_from_the_host_memory():
    host = torch.ones(16)
    view = torch_fl._C.device_view_of_host(host, 0)
    with pytest.raises(RuntimeError, match="not resizable"):
        view.untyped_storage().resize_(1024)
    assert view.data_ptr() == host.data_ptr()
