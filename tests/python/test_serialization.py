"""torch.save / torch.load of fl tensors and state dicts, mapped to fl or CPU, bit-exact."""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn as nn

from conftest import assert_same


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_tensor_roundtrip_keeps_device_and_bits(dtype, weights_only):
    cpu = (torch.randn(5, 7) * 100).to(dtype)
    t = cpu.to("fl:1")
    back = _roundtrip(t, weights_only=weights_only)
    assert back.device == torch.device("fl:1")
    assert_same(back, cpu, exact=True)


@pytest.mark.parametrize("map_location,expected", [
    ("cpu", "cpu"), ("fl", "fl:0"), ("fl:0", "fl:0"), (torch.device("fl:1"), "fl:1"), ({"fl:1": "fl:0"}, "fl:0"),
    (lambda storage, loc: storage, "cpu"),         # a callable gets the CPU copy of each storage
])
def test_map_location(map_location, expected):
    cpu = torch.randn(3, 4)
    back = _roundtrip(cpu.to("fl:1"), map_location=map_location)
    assert back.device == torch.device(expected)
    assert_same(back, cpu, exact=True)


def test_cpu_tensor_loaded_onto_fl():
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    back = _roundtrip(cpu, map_location="fl:1")
    assert back.device == torch.device("fl:1")
    assert_same(back, cpu, exact=True)


def test_views_share_storage_after_load():
    base = torch.randn(6, 4).to("fl")
    obj = {"base": base, "view": base[2:, 1:3], "t": base.t()}
    back = _roundtrip(obj)
    assert back["view"].untyped_storage().data_ptr() == back["base"].untyped_storage().data_ptr()
    assert back["t"].stride() == (1, 4)
    back["base"][3, 2] = 42.0
    assert back["view"][1, 1].item() == 42.0
    assert back["t"][2, 3].item() == 42.0


def test_state_dict_roundtrip_bit_exact():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    model.to("fl")
    model(torch.randn(2, 1, 6, 6).to("fl"))   # updates BatchNorm's running stats on fl
    sd = model.state_dict()
    for loc in (None, "cpu", "fl:1"):
        back = _roundtrip(sd, **({} if loc is None else {"map_location": loc}))
        for k, v in sd.items():
            assert back[k].device == (v.device if loc is None else torch.device(loc))
            assert_same(back[k], v.cpu(), exact=True)
    fresh = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    fresh.load_state_dict(_roundtrip(sd, map_location="cpu"))
    x = torch.randn(2, 1, 6, 6)
    model.eval()
    fresh.eval()
    assert_same(model(x.to("fl")), fresh(x), rtol=1e-6, atol=1e-6)


def test_save_to_file_and_optimizer_state(tmp_path):
    model = nn.Linear(3, 2).to("fl")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3).to("fl")).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    ck = torch.load(path, map_location="fl:0")
    st = ck["opt"]["state"][0]
    assert st["exp_avg"].device == torch.device("fl:0")
    assert_same(st["exp_avg"], opt.state_dict()["state"][0]["exp_avg"].cpu(), exact=True)
    model2 = nn.Linear(3, 2).to("fl")
    opt2 = torch.optim.Adam(model2.parameters())
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    assert opt2.state[model2.weight]["exp_avg"].device.type == "fl"


def test_untyped_storage_roundtrip():
    s = torch.tensor([1, 2, 3], dtype=torch.uint8).to("fl").untyped_storage()
    back = _roundtrip(s, weights_only=False)
    assert back.device.type == "fl"
    assert list(back.cpu()) == [1, 2, 3]
