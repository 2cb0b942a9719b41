"""Streams and events on fl: torch.fl.Stream/Event and the generic torch.Stream/torch.Event."""
from __future__ import annotations

import pytest
import torch

from conftest import assert_same


def test_default_and_current_stream():
    d = torch.fl.default_stream(0)
    c = torch.fl.current_stream(0)
    assert d.device == torch.device("fl:0")
    assert d.stream_id == 0
    assert c == d
    assert torch.fl.default_stream(1).device == torch.device("fl:1")


def test_fl_stream_object():
    s = torch.fl.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("fl", torch.fl.current_device())
    assert s.stream_id != 0
    s1 = torch.fl.Stream("fl:1")
    assert s1.device == torch.device("fl:1")
    assert s.query()
    s.synchronize()


def test_torch_stream_and_event_on_fl():
    s = torch.Stream(device="fl:0")
    assert s.device.type == "fl"
    e = torch.Event(device="fl:0")
    assert e.device.type == "fl"
    x = torch.randn(64, 64).to("fl:0")
    with torch.fl.stream(s):
        y = x @ x
        e.record(s)
    e.synchronize()
    assert e.query()
    assert_same(y, x.cpu() @ x.cpu())


def test_set_stream_changes_current():
    s = torch.fl.Stream()
    prev = torch.fl.current_stream()
    with torch.fl.stream(s):
        assert torch.fl.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert torch.fl.current_stream() == prev
    torch.accelerator.set_stream(s)
    assert torch.fl.current_stream() == s
    torch.accelerator.set_stream(prev)
    with s:
        assert torch.fl.current_stream() == s
    assert torch.fl.current_stream() == prev


def test_event_record_wait_query_synchronize():
    # Small integers: every product and partial sum is exact in float32, so the result is the
    # same whatever order the plugin's BLAS and torch's CPU sum in (random floats differ by
    # ~1e-5 between OpenBLAS and MKL on some CPUs), and a stale or early read would show.
    cpu = torch.randint(-4, 5, (256, 256)).float()
    x = cpu.to("fl")
    e = torch.fl.Event()
    y = x @ x + 1
    e.record()
    e.synchronize()
    assert e.query()
    assert_same(y, cpu @ cpu + 1, exact=True)


def test_side_stream_ordered_by_wait_event():
    cpu = torch.randn(128, 128)
    side = torch.fl.Stream()
    main = torch.fl.current_stream()
    x = cpu.to("fl")
    x.mul_(3)                 # on the default stream
    ready = torch.fl.Event()
    ready.record(main)
    side.wait_event(ready)    # side stream sees x * 3
    with torch.fl.stream(side):
        y = x.add(1).mul(2)
        done = torch.fl.Event()
        done.record(side)
    main.wait_event(done)
    assert_same(y, (cpu * 3 + 1) * 2)


def test_wait_stream():
    cpu = torch.randn(100)
    side = torch.fl.Stream()
    x = cpu.to("fl")
    side.wait_stream(torch.fl.current_stream())
    with torch.fl.stream(side):
        y = torch.exp(x)
    torch.fl.current_stream().wait_stream(side)
    assert_same(y, torch.exp(cpu))


def test_fl_event_is_a_torch_event():
    e = torch.fl.Event(enable_timing=True)
    assert type(e) is torch.Event and isinstance(e, torch.fl.Event)
    assert e.device.type == "fl"
    assert not isinstance(torch.Event(device="cpu"), torch.fl.Event)


def test_elapsed_time():
    start = torch.fl.Event(enable_timing=True)
    end = torch.fl.Event(enable_timing=True)
    x = torch.randn(256, 256, device="fl")
    start.record()
    for _ in range(5):
        x = x @ x / 256
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0


def test_elapsed_time_with_torch_event():
    start = torch.Event(device="fl", enable_timing=True)
    end = torch.Event(device="fl", enable_timing=True)
    start.record()
    torch.ones(1000, device="fl").sum()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_stream_record_event_returns_event():
    s = torch.fl.Stream()
    with torch.fl.stream(s):
        x = torch.ones(10, device="fl") * 5
    ev = s.record_event()
    ev.synchronize()
    assert ev.query()
    assert_same(x, torch.full((10,), 5.0))


def test_record_stream_keeps_block_until_stream_is_done():
    side = torch.fl.Stream()
    cpu = torch.randn(1 << 16)
    x = cpu.to("fl")
    side.wait_stream(torch.fl.current_stream())
    with torch.fl.stream(side):
        y = x * 2
    x.record_stream(side)
    del x
    # A new allocation of the same size is safe to fill while the side stream may still read.
    z = torch.zeros(1 << 16, device="fl")
    torch.fl.current_stream().wait_stream(side)
    assert_same(y, cpu * 2)
    assert int(torch.count_nonzero(z.cpu())) == 0


def test_streams_on_second_device():
    s = torch.fl.Stream("fl:1")
    cpu = torch.arange(10.0)
    with torch.fl.device(1), torch.fl.stream(s):
        y = cpu.to("fl:1") + 1
        e = torch.fl.Event()
        e.record(s)
    e.synchronize()
    assert y.device == torch.device("fl:1")
    assert_same(y, cpu + 1)


def test_event_on_other_device_stream_is_rejected():
    s1 = torch.fl.Stream("fl:1")
    e = torch.fl.Event()
    e.record(torch.fl.Stream("fl:0"))
    with pytest.raises(RuntimeError):
        e.record(s1)


def test_a_stream_waits_on_an_event_of_another_device_of_its_plugin():
    """stream.wait_event with an event of another device of the same plugin goes through the
    plugin's peer wait (fl.stream_wait_peer_event): once the waiting stream has drained, the
    event's work is done; an event is queried and synchronized through its own device whatever
    device is current; elapsed_time of events on two devices is refused."""
    torch.fl.set_device(0)
    a = torch.randn(600, 600, dtype=torch.float64, device="fl:0")
    done = torch.Event(device="fl:0", enable_timing=True)
    begin = torch.Event(device="fl:0", enable_timing=True)
    begin.record(torch.fl.current_stream(0))
    b = a @ a @ a
    done.record(torch.fl.current_stream(0))
    waiter = torch.Stream(device="fl:1")
    waiter.wait_event(done)
    waiter.synchronize()
    assert done.query()
    torch.fl.set_device(1)
    try:
        done.synchronize()
        assert begin.elapsed_time(done) >= 0.0
        other = torch.Event(device="fl:1", enable_timing=True)
        other.record(waiter)
        other.synchronize()
        with pytest.raises(RuntimeError, match="both events must be recorded on one device"):
            begin.elapsed_time(other)
    finally:
        torch.fl.set_device(0)
    assert torch.isfinite(b.cpu()).all()
