"""The caching allocator seen from PyTorch: torch.fl memory queries, torch.accelerator memory
queries, empty_cache, and the memory_fraction cap turning into torch.OutOfMemoryError."""
from __future__ import annotations

import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = 1  # fl:1 keeps these counts apart from the other tests, which mostly use fl:0
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _clean_fl1():
    gc.collect()
    torch.fl.synchronize(DEV)
    torch.fl.empty_cache()
    yield
    torch.fl.set_per_process_memory_fraction(1.0, DEV)
    gc.collect()
    torch.fl.empty_cache()


def test_allocated_grows_and_returns_to_baseline():
    base = torch.fl.memory_allocated(DEV)
    x = torch.empty(MiB, dtype=torch.float32, device=f"fl:{DEV}")   # 4 MiB
    assert torch.fl.memory_allocated(DEV) >= base + 4 * MiB
    y = x * 2
    assert torch.fl.memory_allocated(DEV) >= base + 8 * MiB
    assert torch.fl.max_memory_allocated(DEV) >= base + 8 * MiB
    del x, y
    assert torch.fl.memory_allocated(DEV) == base


def test_reserved_and_empty_cache():
    base_reserved = torch.fl.memory_reserved(DEV)
    x = torch.empty(4 * MiB, dtype=torch.uint8, device=f"fl:{DEV}")
    assert torch.fl.memory_reserved(DEV) >= base_reserved + 4 * MiB
    assert torch.fl.memory_reserved(DEV) >= torch.fl.memory_allocated(DEV)
    del x
    # Freed blocks stay cached until empty_cache releases them.
    assert torch.fl.memory_reserved(DEV) >= base_reserved + 4 * MiB
    torch.fl.empty_cache()
    assert torch.fl.memory_reserved(DEV) == base_reserved
    assert torch.fl.max_memory_reserved(DEV) >= base_reserved + 4 * MiB


def test_reset_peak_memory_stats():
    x = torch.empty(2 * MiB, dtype=torch.uint8, device=f"fl:{DEV}")
    del x
    assert torch.fl.max_memory_allocated(DEV) >= 2 * MiB
    torch.fl.reset_peak_memory_stats(DEV)
    assert torch.fl.max_memory_allocated(DEV) == torch.fl.memory_allocated(DEV)


def test_memory_stats_keys_and_counts():
    before = torch.fl.memory_stats(DEV)
    x = torch.empty(1000, device=f"fl:{DEV}")
    after = torch.fl.memory_stats(DEV)
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "allocation.all.allocated", "allocation.all.freed",
                "segment.all.current", "num_ooms", "num_alloc_retries"):
        assert key in after, key
    assert after["allocation.all.allocated"] == before["allocation.all.allocated"] + 1
    del x
    assert torch.fl.memory_stats(DEV)["allocation.all.freed"] == before["allocation.all.freed"] + 1


def test_accelerator_memory_queries_agree():
    x = torch.empty(3 * MiB, dtype=torch.uint8, device=f"fl:{DEV}")
    assert torch.accelerator.memory_allocated(DEV) == torch.fl.memory_allocated(DEV)
    assert torch.accelerator.memory_reserved(DEV) == torch.fl.memory_reserved(DEV)
    assert torch.accelerator.max_memory_allocated(DEV) == torch.fl.max_memory_allocated(DEV)
    stats = torch.accelerator.memory_stats(DEV)
    assert stats["allocated_bytes.all.current"] == torch.fl.memory_allocated(DEV)
    free, total = torch.accelerator.get_memory_info(DEV)
    assert 0 < free <= total
    del x
    torch.accelerator.empty_cache()
    assert torch.fl.memory_reserved(DEV) == torch.fl.memory_allocated(DEV)


def _fraction_for(limit_bytes: int) -> float:
    total = torch.fl.get_device_properties(DEV)["total_memory"]
    return limit_bytes / total


def test_memory_fraction_oom_message_and_recovery():
    torch.fl.set_per_process_memory_fraction(_fraction_for(64 * MiB), DEV)
    assert torch.fl.get_per_process_memory_fraction(DEV) == pytest.approx(_fraction_for(64 * MiB))
    ooms_before = torch.fl.memory_stats(DEV)["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(128 * MiB, dtype=torch.uint8, device=f"fl:{DEV}")
    msg = str(info.value)
    assert "out of memory" in msg
    assert "memory_fraction" in msg and "Allocated" in msg and "reserved" in msg
    assert "empty_cache" in msg
    assert torch.fl.memory_stats(DEV)["num_ooms"] == ooms_before + 1
    # Under the cap allocations still succeed.
    y = torch.ones(MiB, dtype=torch.uint8, device=f"fl:{DEV}")
    assert int(y.sum()) == MiB


def test_training_continues_after_oom_and_empty_cache():
    dev = torch.device(f"fl:{DEV}")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    ref = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    ref.load_state_dict(model.state_dict())
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    y = torch.randint(0, 4, (16,))

    def step(m, o, xb, yb):
        loss = F.cross_entropy(m(xb), yb)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss.item()

    step(model, opt, x.to(dev), y.to(dev))
    step(ref, ref_opt, x, y)
    torch.fl.set_per_process_memory_fraction(_fraction_for(16 * MiB), DEV)
    hog = []
    with pytest.raises(torch.OutOfMemoryError):
        for _ in range(64):
            hog.append(torch.empty(MiB, dtype=torch.uint8, device=dev))
    del hog
    torch.fl.empty_cache()
    assert torch.fl.memory_reserved(DEV) < 16 * MiB
    losses = [step(model, opt, x.to(dev), y.to(dev)) for _ in range(3)]
    ref_losses = [step(ref, ref_opt, x, y) for _ in range(3)]
    assert losses == pytest.approx(ref_losses, abs=1e-5)


def test_bad_fraction_is_value_error():
    with pytest.raises(ValueError, match="memory_fraction"):
        torch.fl.set_per_process_memory_fraction(1.5, DEV)


def test_growing_a_tensor_keeps_its_values_and_its_view_offset():
    """resize_ past the storage grows it with the plugin's device-to-device copy (ATen's CPU
    resize copied the old bytes with a host memcpy: on the CUDA plugin, a crash); an out=
    argument of another size takes the result."""
    x = torch.arange(4.0, device="fl:0")
    x.resize_(8)
    assert x.shape == (8,) and x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    tail = torch.arange(12.0, device="fl:0")[10:12]
    tail.resize_(6)
    assert tail.storage_offset() == 10 and tail[:2].cpu().tolist() == [10.0, 11.0]
    assert tail.untyped_storage().nbytes() >= 16 * 4
    out = torch.zeros(2, device="fl:0")
    with pytest.warns(UserWarning, match="resized"):
        torch.add(torch.ones(5, device="fl:0"), torch.ones(5, device="fl:0"), out=out)
    assert out.cpu().tolist() == [2.0] * 5


def test_growing_a_tensor_on_a_side_stream_keeps_its_values_while_other_streams_allocate():
    """The grow's copy is queued on the current stream; the old block, freed to the pool of the
    stream that allocated it, was reused there before the copy had read it (2 of 5 trials
    corrupted before it was recorded on the copying stream)."""
    n = 1 << 20
    for _ in range(5):
        x = torch.ones(n, device="fl:0") * 5
        torch.fl.synchronize()
        side = torch.fl.Stream("fl:0")
        with torch.fl.stream(side):
            a = torch.randn(600, 600, device="fl:0")
            for _ in range(6):
                a = a @ a / 25  # keeps the side stream busy
            x.resize_(2 * n)
        torch.full((n,), -1.0, device="fl:0")  # the default stream allocates meanwhile
        torch.fl.synchronize()
        assert torch.unique(x[:n].cpu()).tolist() == [5.0]


def test_resize_fills_grown_memory_under_deterministic_algorithms_and_same_sizes_change_nothing():
    torch.use_deterministic_algorithms(True)
    try:
        x = torch.arange(4.0, device="fl:0")
        x.resize_(8)
        assert torch.isnan(x[4:].cpu()).all() and x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        # empty() as on CPU and CUDA: NaN, or an integer type's largest value
        assert torch.isnan(torch.empty(3, device="fl:0").cpu()).all()
        assert torch.isnan(torch.empty_strided((2, 2), (1, 2), device="fl:0").cpu()).all()
        assert torch.empty(2, dtype=torch.int64, device="fl:0").cpu().tolist() == [2**63 - 1] * 2
    finally:
        torch.use_deterministic_algorithms(False)
    same = torch.arange(4.0, device="fl:0")
    same.untyped_storage().resize_(0)
    same.resize_(4)  # as on the CPU: the sizes are unchanged, so the storage is left alone
    assert same.untyped_storage().nbytes() == 0
