"""torch_fl.profile() and torch_fl.coverage_report()."""
from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl
from conftest import op_calls


def test_profile_table_counts_ops_by_tier():
    x = torch.randn(32, 32).to("fl")
    with torch_fl.profile(warn_above=1.0) as prof:
        y = (x @ x).relu()
        z = torch.hypot(y, y)          # no plugin kernel: CPU fallback
        z.sum().item()
    ops = prof.ops
    assert op_calls(ops, "aten::mm") == {"native": 1, "generic": 0, "cpu_fallback": 0}
    assert op_calls(ops, "aten::relu") == {"native": 1, "generic": 0, "cpu_fallback": 0}
    assert op_calls(ops, "aten::hypot") == {"native": 0, "generic": 0, "cpu_fallback": 1}
    mm_key = next(k for k in ops if k.startswith("aten::mm"))
    assert ops[mm_key]["kernel"] == "aten::mm.out"
    assert all(v["seconds"] >= 0 for v in ops.values())
    assert ops[mm_key]["seconds"] > 0
    table = prof.table()
    assert "aten::mm" in table and "native" in table and "cpu_fallback" in table
    assert "fallback ratio" in table
    native = sum(v["native"] for v in ops.values())
    other = sum(v["generic"] + v["cpu_fallback"] for v in ops.values())
    assert abs(prof.fallback_ratio - other / (native + other)) < 1e-12
    assert prof.wall_seconds > 0
    assert not torch_fl._C.profiling()


def test_profile_device_time_measures_each_op_on_the_device():
    big = torch.randn(384, 384).to("fl")
    small = torch.randn(4).to("fl")
    (big @ big).relu()  # first calls (meta registrations) stay out of the block
    torch.fl.synchronize()
    with torch_fl.profile(warn_above=1.0, device_time=True) as prof:
        for _ in range(3):
            big @ big
            small.relu()
    mm = prof.ops[next(k for k in prof.ops if k.startswith("aten::mm"))]
    relu = prof.ops[next(k for k in prof.ops if k.startswith("aten::relu"))]
    assert mm["native"] == 3 and relu["native"] == 3
    # Each pair of events brackets the op's kernel on its stream: a 384^3 GEMM takes longer
    # on the device than a 4-element relu, and neither time is negative.
    assert mm["device_seconds"] > relu["device_seconds"] >= 0
    assert mm["device_seconds"] > 0
    assert "device ms" in prof.table()
    assert not torch_fl._C.device_timing()
    # Off again: more ops add no device time.
    before = torch_fl.fallback_stats()[next(k for k in prof.ops if k.startswith("aten::mm"))]["device_seconds"]
    big @ big
    torch.fl.synchronize()
    torch_fl._C.flush_device_times()
    after = torch_fl.fallback_stats()[next(k for k in prof.ops if k.startswith("aten::mm"))]["device_seconds"]
    assert after == before


def test_profile_warns_when_fallback_ratio_is_high():
    x = torch.randn(8).to("fl")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch_fl.profile(warn_above=0.10) as prof:
            for _ in range(5):
                torch.hypot(x, x)
    assert prof.fallback_ratio > 0.10
    msgs = [str(w.message) for w in caught if "left the native tier" in str(w.message)]
    assert len(msgs) == 1 and "threshold 10%" in msgs[0]


def test_profile_quiet_when_all_native():
    x = torch.randn(8, 8).to("fl")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch_fl.profile() as prof:
            (x + x).mul(2)
    assert prof.fallback_ratio == 0.0
    assert not [w for w in caught if "left the native tier" in str(w.message)]


def test_coverage_report_lists_ops_with_tiers():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    x = torch.randn(2, 1, 6, 6)

    def step():
        F.cross_entropy(model(x), torch.tensor([0, 2])).backward()

    report = torch_fl.coverage_report(step)
    assert set(report["aten::addmm"]) == {"fl:0", "fl:1"}
    assert report["aten::addmm"]["fl:0"] == torch_fl.op_support("aten::addmm")
    assert report["aten::relu"]["fl:0"] == "native"
    assert "aten::convolution" in report or "aten::convolution_overrideable" in report
    tiers = {t for per_dev in report.values() for t in per_dev.values()}
    assert tiers <= {"native", "generic", "cpu_fallback", "error"}, tiers
    assert any(op.startswith("aten::_log_softmax") for op in report)
    assert any("backward" in op for op in report)      # backward ops recorded too
    only0 = torch_fl.coverage_report(step, devices=[0])
    assert all(set(v) == {"fl:0"} for v in only0.values())


def test_output_meta_cache_ignores_float_values_where_shapes_do_not_depend_on_them():
    x = torch.randn(16).to("fl")
    y = torch.randn(16).to("fl")
    x.add(y, alpha=0.5)
    before = torch_fl._C.output_meta_cache_entries()
    for k in range(20):  # a learning rate that changes every step
        out = x.add(y, alpha=0.01 * (k + 1))
        torch.testing.assert_close(out.cpu(), x.cpu() + 0.01 * (k + 1) * y.cpu())
    assert torch_fl._C.output_meta_cache_entries() - before <= 1
    # Where float values size the output, they stay part of the key.
    for step in (0.5, 0.25, 0.1):
        assert torch.arange(0.0, 1.0, step, device="fl").shape == torch.arange(0.0, 1.0, step).shape
    img = torch.randn(1, 1, 4, 4).to("fl")
    for scale in (2.0, 3.0):
        got = F.interpolate(img, scale_factor=scale, mode="nearest")
        assert got.shape == (1, 1, int(4 * scale), int(4 * scale))
        torch.testing.assert_close(got.cpu(), F.interpolate(img.cpu(), scale_factor=scale, mode="nearest"))


def test_fallback_survey_lists_what_did_not_run_native():
    """tools/fallback_survey.py on the CPU plugin: every family runs, each listed op is one the
    fallback counters saw leave the native tier, and the ops made native for these families
    (rotary sin/cos, nearest upsampling, log_sigmoid, leaky_relu, hardtanh, gather/scatter, flip,
    cumsum, sort, topk...) are not listed."""
    import pathlib
    import subprocess
    import sys

    tool = pathlib.Path(__file__).resolve().parents[2] / "tools" / "fallback_survey.py"
    run = subprocess.run([sys.executable, str(tool), "fl:0"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for family in ("llama", "unet", "vit", "gan_discriminator", "metrics_and_losses"):
        assert f"== {family}:" in run.stdout
    listed = [line.split()[0] for line in run.stdout.splitlines() if line.startswith("   aten::")]
    assert listed, run.stdout  # the CPU plugin leaves its random fills to ATen on purpose
    assert "aten::normal_" in listed
    for native in ("aten::sin", "aten::cos", "aten::upsample_nearest2d", "aten::log_sigmoid_forward",
                   "aten::leaky_relu", "aten::hardtanh", "aten::erf", "aten::max", "aten::bitwise_and",
                   "aten::gather", "aten::scatter", "aten::scatter_add", "aten::flip", "aten::cumsum",
                   "aten::sort", "aten::topk"):
        assert not any(op == native or op.startswith(native + ".") for op in listed), (native, listed)
    strict = subprocess.run([sys.executable, str(tool), "fl:0", "--strict"], capture_output=True, text=True,
                            timeout=300)
    assert strict.returncode == 1  # the random fills count as CPU fallback


def test_check_device_errors_holds_on_the_cpu_plugin():
    """tools/gpu/check_device_errors.py (run on the H200 against the CUDA plugin) on fl:0: a bad
    index or loss target raises at the next wait, with ATen's wording, and the device works on."""
    import pathlib
    import subprocess
    import sys

    tool = pathlib.Path(__file__).resolve().parents[2] / "tools" / "gpu" / "check_device_errors.py"
    run = subprocess.run([sys.executable, str(tool), "fl:0"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "fl:0: 6 of 6 cases hold" in run.stdout
    assert run.stdout.count("\nok    ") + run.stdout.startswith("ok    ") == 6
