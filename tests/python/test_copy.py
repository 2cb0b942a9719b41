"""Copies: host↔device, fl:0↔fl:1, non_blocking, dtype conversion, non-contiguous source and
destination, pinned host memory."""
from __future__ import annotations

import json

import pytest
import torch

import torch_fl
from conftest import BUILD, assert_same, run_python

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]


def _data(dtype, shape=(6, 5)):
    t = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 50
    return t.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_device_roundtrip(dtype):
    cpu = _data(dtype)
    f = cpu.to("fl")
    assert f.device == torch.device("fl:0") and f.dtype == dtype
    assert_same(f, cpu, exact=True)
    assert_same(f.to("fl:1"), cpu, exact=True)
    assert_same(f.to("fl:1").to("fl:0"), cpu, exact=True)


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.float64), (torch.float64, torch.float32), (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.float32), (torch.float32, torch.int64), (torch.int64, torch.float32),
    (torch.bool, torch.float32), (torch.float32, torch.bool), (torch.int64, torch.int32),
    (torch.uint8, torch.float16),
])
@pytest.mark.parametrize("route", ["h2d", "d2h", "d2d", "d2d_peer"])
def test_dtype_conversion_copies(src_dtype, dst_dtype, route):
    cpu = _data(src_dtype)
    expected = cpu.to(dst_dtype)
    if route == "h2d":
        out = cpu.to("fl", dst_dtype)
    elif route == "d2h":
        out = cpu.to("fl").to("cpu", dst_dtype)
    elif route == "d2d":
        out = cpu.to("fl").to(dst_dtype)
    else:
        out = cpu.to("fl:0").to("fl:1", dst_dtype)
    assert out.dtype == dst_dtype
    assert_same(out, expected, exact=True)


@pytest.mark.parametrize("route", ["h2d", "d2h", "d2d", "d2d_peer"])
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded_src", "permuted"])
def test_non_contiguous_copies(route, layout):
    src_dev = "cpu" if route == "h2d" else "fl:0"
    dst_dev = {"h2d": "fl:0", "d2h": "cpu", "d2d": "fl:0", "d2d_peer": "fl:1"}[route]
    base = torch.arange(48, dtype=torch.float32).reshape(4, 12)
    src_base = base.to(src_dev)
    if layout == "transposed":
        src, shape = src_base.t(), (12, 4)
    elif layout == "sliced":
        src, shape = src_base[:, ::3], (4, 4)
    elif layout == "expanded_src":
        src, shape = src_base[0:1].expand(3, 12), (3, 12)
    else:
        src, shape = src_base.reshape(2, 2, 12).permute(2, 0, 1), (12, 2, 2)
    expected_src = {"transposed": base.t(), "sliced": base[:, ::3], "expanded_src": base[0:1].expand(3, 12),
                    "permuted": base.reshape(2, 2, 12).permute(2, 0, 1)}[layout]
    # Contiguous destination.
    dst = torch.full(shape, -1.0, device=dst_dev)
    dst.copy_(src)
    assert_same(dst, expected_src.contiguous(), exact=True)
    # Non-contiguous destination: a strided view of a larger tensor; the rest stays untouched.
    big = torch.full((shape[0], 2 * shape[1]) + tuple(shape[2:]), -1.0, device=dst_dev)
    view = big[:, ::2]
    view.copy_(src)
    expected_big = torch.full(big.shape, -1.0)
    expected_big[:, ::2] = expected_src
    assert_same(big, expected_big, exact=True)


def test_copy_broadcasts_source():
    dst = torch.zeros(3, 4, device="fl")
    dst.copy_(torch.arange(4.0))
    assert_same(dst, torch.arange(4.0).expand(3, 4).contiguous(), exact=True)
    dst.copy_(torch.tensor(2.5).to("fl"))
    assert_same(dst, torch.full((3, 4), 2.5), exact=True)


@pytest.mark.parametrize("route", ["h2d", "d2h", "d2d_peer"])
def test_non_blocking_copies(route):
    cpu = torch.randn(1000)
    if route == "h2d":
        out = cpu.to("fl", non_blocking=True)
    elif route == "d2h":
        out = cpu.to("fl").to("cpu", non_blocking=True)
    else:
        out = cpu.to("fl:0").to("fl:1", non_blocking=True)
    torch.fl.synchronize(0)
    torch.fl.synchronize(1)
    assert_same(out, cpu, exact=True)


def test_pinned_memory_to_fl_non_blocking():
    cpu = torch.randn(64, 64)
    pinned = cpu.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu"
    assert_same(pinned, cpu, exact=True)
    out = pinned.to("fl", non_blocking=True)
    torch.fl.current_stream().synchronize()
    assert_same(out, cpu, exact=True)
    back = torch.empty(64, 64).pin_memory()
    back.copy_(out, non_blocking=True)
    torch.fl.synchronize()
    assert_same(back, cpu, exact=True)
    assert not cpu.is_pinned()


def _queue_busy_work(device: str = "fl:0") -> None:
    """Queues about half a second of matrix products on the device's current stream (the CPU
    plugin runs them on its stream thread), so that a copy queued next is still pending when
    the test looks at it."""
    a = torch.full((1536, 1536), 1e-3, device=device)
    b = a
    for _ in range(4):
        b = b @ a


def test_non_blocking_copy_from_pinned_memory_stays_queued():
    src = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
    _queue_busy_work()
    out = src.to("fl:0", non_blocking=True)
    assert not torch.fl.current_stream(0).query()  # queued behind the products, not waited for
    torch.fl.synchronize(0)
    assert_same(out, torch.arange(1 << 16, dtype=torch.float32), exact=True)


def test_non_blocking_copy_into_pinned_memory_stays_queued():
    out = torch.arange(1 << 16, dtype=torch.float32).to("fl:0")
    back = torch.empty(1 << 16).pin_memory()
    _queue_busy_work()
    back.copy_(out, non_blocking=True)
    assert not torch.fl.current_stream(0).query()
    torch.fl.synchronize(0)
    assert_same(back, torch.arange(1 << 16, dtype=torch.float32), exact=True)
    # As with CUDA, .to("cpu", non_blocking=True) returns pinned memory for such a copy.
    assert out.to("cpu", non_blocking=True).is_pinned()
    torch.fl.synchronize(0)


def test_non_blocking_copy_from_pageable_memory_is_done_on_return():
    src = torch.arange(1 << 16, dtype=torch.float32)
    _queue_busy_work()
    out = src.to("fl:0", non_blocking=True)
    assert torch.fl.current_stream(0).query()  # the pageable source may be freed right after
    assert_same(out, src, exact=True)


def test_pinned_block_is_not_reused_before_its_copy_ran():
    torch.fl.empty_cache()
    n = 1 << 18  # 1 MiB of float32: a power of two, so the cached block is exactly this size
    src = torch.full((n,), 7.0).pin_memory()
    first = src.data_ptr()
    _queue_busy_work()
    out = src.to("fl:0", non_blocking=True)
    del src  # freed while the copy waits: the block goes to the cache, marked busy
    assert torch_fl._C.pinned_cached_bytes() == 4 * n
    other = torch.full((n,), -1.0).pin_memory()  # must not get the busy block
    second = other.data_ptr()
    assert second != first
    torch.fl.synchronize(0)
    assert_same(out, torch.full((n,), 7.0), exact=True)
    del other
    assert torch_fl._C.pinned_cached_bytes() == 8 * n
    again = torch.empty(n).pin_memory()  # both blocks are free now: one is reused
    assert again.data_ptr() in (first, second)
    assert torch_fl._C.pinned_cached_bytes() == 4 * n
    del again
    torch.fl.empty_cache()
    assert torch_fl._C.pinned_cached_bytes() == 0


def test_pinned_destination_is_not_reused_before_its_copy_ran():
    """A pinned tensor freed while a non_blocking device-to-host copy into it is queued: its
    block is not handed out again before the copy ran (the copy would write into the new
    owner's data)."""
    torch.fl.empty_cache()
    n = 1 << 18
    out = torch.full((n,), 5.0).to("fl:0")
    back = torch.empty(n).pin_memory()
    first = back.data_ptr()
    _queue_busy_work()
    back.copy_(out, non_blocking=True)
    del back
    other = torch.full((n,), -1.0).pin_memory()
    assert other.data_ptr() != first
    torch.fl.synchronize(0)
    assert_same(other, torch.full((n,), -1.0), exact=True)


def test_empty_and_scalar_copies():
    e = torch.empty(0, 3).to("fl")
    assert e.shape == (0, 3) and e.device.type == "fl"
    assert e.cpu().shape == (0, 3)
    s = torch.tensor(3.25).to("fl")
    assert s.dim() == 0 and s.item() == 3.25
    assert_same(s.to("fl:1"), torch.tensor(3.25), exact=True)


def test_clone_and_contiguous_on_fl():
    cpu = torch.randn(5, 6)
    f = cpu.to("fl")
    c = f.t().clone()
    assert_same(c, cpu.t(), exact=True)
    assert c.stride() == cpu.t().clone().stride()
    cc = f.t().contiguous()
    assert cc.is_contiguous()
    assert_same(cc, cpu.t().contiguous(), exact=True)
    assert f.clone().data_ptr() != f.data_ptr()


def test_large_copy():
    cpu = torch.randn(1 << 20)
    assert_same(cpu.to("fl").to("fl:1").cpu(), cpu, exact=True)


CROSS_PLUGIN_CODE = r"""
import json, torch, torch_fl
devices = torch_fl.list_devices()
cpu_dev = next(d for d in devices if d["plugin"] == "cpu")
other = next(d for d in devices if d["plugin"] == "template")
a, b = cpu_dev["device"], other["device"]
base = torch.arange(60, dtype=torch.float32).reshape(5, 12) - 7.5
results = {"host_accessible": [cpu_dev["host_accessible"], other["host_accessible"]]}
def same(x, y):
    return bool(torch.equal(x.cpu(), y))
for src, dst in ((a, b), (b, a)):
    s = base.to(src)
    results[f"{src}->{dst} contiguous"] = same(s.to(dst), base)
    results[f"{src}->{dst} transposed src"] = same(s.t().to(dst), base.t())
    results[f"{src}->{dst} dtype"] = same(s.to(dst, torch.float64), base.double())
    out = torch.zeros(12, 5, device=dst)
    out.copy_(s.t())
    results[f"{src}->{dst} into transposed dst"] = same(out, base.t())
    # Written on the source device just before the copy (ordering against its stream).
    s2 = s * 2 + 1
    results[f"{src}->{dst} after queued work"] = same(s2.to(dst), base * 2 + 1)
    # Larger than the staging pool's smallest buffer, twice (the second reuses the buffer).
    big = torch.randn(1024, 768, generator=torch.Generator().manual_seed(0))
    big_src = big.to(src)
    results[f"{src}->{dst} 3 MB"] = same(big_src.to(dst), big)
    results[f"{src}->{dst} 3 MB again, negated"] = same((-big_src).to(dst), -big)
    # non_blocking, read back on dst's stream (ordered behind the queued copy).
    results[f"{src}->{dst} 3 MB non_blocking"] = same((big_src + 1).to(dst, non_blocking=True), big + 1)
results["staging_cached_bytes"] = torch_fl._C.staging_cached_bytes()
results["pinned_cached_bytes"] = torch_fl._C.pinned_cached_bytes()
print(json.dumps(results))
"""


@pytest.mark.parametrize("cpu_host_accessible,template_host_accessible", [("1", "1"), ("0", "1"), ("0", "0")])
def test_copies_between_two_plugins(tmp_path, cpu_host_accessible, template_host_accessible):
    """The CPU plugin's fl:0 and the template plugin's device (both in one process): copies
    each way with every layout, with one side's memory host-accessible (one direct copy) and
    neither (staged through a pooled host buffer pinned by the source's plugin)."""
    plugins = [BUILD / "plugins" / "cpu" / "libfl_cpu.so", BUILD / "plugins" / "template" / "libfl_template.so"]
    if not plugins[1].exists():
        pytest.skip("the template plugin is not in this build tree")
    config = tmp_path / "config.yaml"
    config.write_text("plugins:\n  enable: [cpu, template]\n"
                      + ("devices:\n  - {type: cpu}\n  - {type: template, options: \"host_accessible=0\"}\n"
                         if template_host_accessible == "0" else ""))
    r = run_python(CROSS_PLUGIN_CODE, env={"FL_CONFIG": str(config), "FL_CPU_DEVICES": "1",
                                            "FL_PLUGIN_PATH": ":".join(str(p) for p in plugins),
                                            "FL_CPU_HOST_ACCESSIBLE": cpu_host_accessible})
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert results.pop("host_accessible") == [cpu_host_accessible == "1", template_host_accessible == "1"]
    # Only copies between two non-host-accessible devices stage; the pool keeps their buffers:
    # per source plugin a 1 MiB one (the small copies, reused) and a 4 MiB one (the 3 MB copies,
    # the second reusing the first's).
    staged = results.pop("staging_cached_bytes")
    assert staged == (0 if "1" in (cpu_host_accessible, template_host_accessible) else 2 * (5 << 20)), staged
    # A non_blocking copy from a host-accessible device into device memory goes through a
    # pinned block (4 MiB for 3 MB), back in the pinned cache once the copy ran; into host
    # memory, and between two device memories, no block is used.
    pinned = results.pop("pinned_cached_bytes")
    assert pinned == (4 << 20 if (cpu_host_accessible, template_host_accessible) == ("0", "1") else 0), pinned
    assert results and all(results.values()), results


def test_overlapping_copies_are_refused_as_on_the_cpu():
    y = torch.arange(6.0).to("fl:0")
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        y[1:].copy_(y[:-1])  # partly the same memory: the result would depend on the copy's order
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.zeros(1, device="fl:0").expand(3).copy_(torch.ones(3))
    assert torch.equal(y.cpu(), torch.arange(6.0))  # nothing was written
    y.copy_(y)  # the same memory entirely, and disjoint parts, stay allowed
    y[:3].copy_(y[3:])
    assert y.cpu().tolist() == [3.0, 4.0, 5.0, 3.0, 4.0, 5.0]
