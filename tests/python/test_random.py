"""Random numbers on fl: per-device generators, seeding, state save/restore. fl:N draws the
same stream as a CPU generator with the same seed (random ops run with its state)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import torch_fl

from conftest import assert_same


def _cpu_gen(seed):
    return torch.Generator().manual_seed(seed)


def test_manual_seed_reproducible_and_equal_to_cpu_stream():
    torch.fl.manual_seed(1234)
    a = torch.randn(100, device="fl")
    b = torch.rand(3, 7, device="fl")
    torch.fl.manual_seed(1234)
    a2 = torch.randn(100, device="fl")
    b2 = torch.rand(3, 7, device="fl")
    assert_same(a2, a.cpu(), exact=True)
    assert_same(b2, b.cpu(), exact=True)
    g = _cpu_gen(1234)
    assert_same(a, torch.randn(100, generator=g), exact=True)
    assert_same(b, torch.rand(3, 7, generator=g), exact=True)
    assert a.device == torch.device("fl:0")


def test_different_seeds_differ():
    torch.fl.manual_seed(1)
    a = torch.randn(50, device="fl").cpu()
    torch.fl.manual_seed(2)
    b = torch.randn(50, device="fl").cpu()
    assert not torch.equal(a, b)


def test_get_set_rng_state():
    torch.fl.manual_seed(7)
    torch.randn(10, device="fl")
    state = torch.fl.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(20, device="fl").cpu()
    torch.fl.set_rng_state(state)
    b = torch.randn(20, device="fl").cpu()
    assert torch.equal(a, b)
    states = torch.fl.get_rng_state_all()
    assert len(states) == torch.fl.device_count()
    c = torch.randint(0, 1000, (30,), device="fl").cpu()
    torch.fl.set_rng_state_all(states)
    d = torch.randint(0, 1000, (30,), device="fl").cpu()
    assert torch.equal(c, d)


def test_generators_are_per_device():
    torch.fl.manual_seed_all(99)
    a0 = torch.randn(10, device="fl:0").cpu()
    a1 = torch.randn(10, device="fl:1").cpu()
    assert torch.equal(a0, a1)            # same seed, independent generators
    torch.fl.set_device(1)
    torch.fl.manual_seed(5)               # only fl:1
    assert torch.fl.initial_seed() == 5
    torch.fl.set_device(0)
    assert torch.fl.initial_seed() == 99
    b1 = torch.randn(10, device="fl:1").cpu()
    assert torch.equal(b1, torch.randn(10, generator=_cpu_gen(5)))


def test_torch_manual_seed_seeds_fl():
    torch.manual_seed(2024)
    a = torch.randn(16, device="fl").cpu()
    assert torch.equal(a, torch.randn(16, generator=_cpu_gen(2024)))


def test_explicit_fl_generator():
    g = torch.Generator(device="fl")
    assert g.device.type == "fl"
    g.manual_seed(11)
    a = torch.randn(8, device="fl", generator=g).cpu()
    g.manual_seed(11)
    b = torch.randn(8, device="fl", generator=g).cpu()
    assert torch.equal(a, b)
    assert torch.equal(a, torch.randn(8, generator=_cpu_gen(11)))


def test_in_place_random_ops_and_dropout():
    torch.fl.manual_seed(3)
    x = torch.empty(40, device="fl").uniform_(-2, 2)
    n = torch.empty(40, device="fl").normal_(1.0, 0.5)
    d = F.dropout(torch.ones(64, device="fl"), p=0.5, training=True)
    perm = torch.randperm(20, device="fl")
    g = _cpu_gen(3)
    assert_same(x, torch.empty(40).uniform_(-2, 2, generator=g), exact=True)
    assert_same(n, torch.empty(40).normal_(1.0, 0.5, generator=g), exact=True)
    dc = d.cpu()
    assert set(dc.unique().tolist()) <= {0.0, 2.0}
    assert 10 < int((dc == 0).sum()) < 54
    assert perm.device.type == "fl"
    assert sorted(perm.cpu().tolist()) == list(range(20))


def test_dropout_repeats_under_the_same_seed_and_moves_the_generator():
    # native_dropout runs in the plugin: the core hands it an RNG pair drawn from the device's
    # generator (ABI 1.2). It had drawn from the plugin's own generator, so torch.manual_seed
    # (Lightning's seed_everything) left dropout masks different from run to run.
    def masks():
        x = torch.ones(256, device="fl:0")
        return [F.dropout(x, p=0.5, training=True).cpu() for _ in range(3)]

    for seed_all in (torch.manual_seed, torch.fl.manual_seed):
        seed_all(11)
        first = masks()
        seed_all(11)
        assert all(torch.equal(a, b) for a, b in zip(first, masks()))
    assert not torch.equal(first[0], first[1])  # each call gets a fresh pair
    torch.manual_seed(12)
    assert not torch.equal(masks()[0], first[0])
    state = torch.fl.get_rng_state(0)
    F.dropout(torch.ones(8, device="fl:0"), p=0.5, training=True)
    assert not torch.equal(torch.fl.get_rng_state(0), state)  # the draw moved the generator
    calls = torch_fl.fallback_stats()["aten::native_dropout"]
    assert calls["native"] > 0 and calls["cpu_fallback"] == 0  # the plugin's kernel, not the CPU's


def test_bernoulli_and_multinomial_reproducible():
    probs = torch.rand(5, 6).to("fl")
    torch.fl.manual_seed(8)
    a = torch.bernoulli(probs).cpu()
    m = torch.multinomial(probs, 3).cpu()
    torch.fl.manual_seed(8)
    assert torch.equal(torch.bernoulli(probs).cpu(), a)
    assert torch.equal(torch.multinomial(probs, 3).cpu(), m)
