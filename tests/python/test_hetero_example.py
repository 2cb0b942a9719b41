"""examples/hetero_train.py end to end on two CPU-plugin devices (FL_CPU_DEVICES=2), once per
model: it trains (the loss falls, the test accuracy beats chance), every step's shards cover
the batch, and it prints each device alone and the issue's two targets. Throughput is printed,
not asserted: here both devices are the same two shared cores."""
from __future__ import annotations

import re

import pytest

from conftest import REPO, run_python

pytest.importorskip("sklearn")


def _example_process(*args: str, timeout: float = 300, before: str = ""):
    """examples/hetero_train.py with `args`, on fl:0 and fl:1 of the CPU plugin, in a fresh process
    (after the Python statements `before`)."""
    code = (before + "\nimport runpy, sys; sys.argv = ['hetero_train.py'] + %r; "
            "runpy.run_path(%r, run_name='__main__')") % (list(args), str(REPO / "examples" / "hetero_train.py"))
    return run_python(code, env={"FL_CPU_DEVICES": "2"}, timeout=timeout)


def _before_each_train_step(imports: str, statements: str) -> str:
    """The `before` of _example_process that runs `statements` (indented, with `calls[0]` the
    call's number from 1) at the start of every HeteroDataParallel.train_step."""
    return (f"import {imports}, torch_fl.parallel as p\n"
            "train_step = p.HeteroDataParallel.train_step\n"
            "calls = [0]\n"
            "def patched(self, *a, **k):\n"
            "    calls[0] += 1\n"
            + "".join(f"    {line}\n" for line in statements.splitlines()) +
            "    return train_step(self, *a, **k)\n"
            "p.HeteroDataParallel.train_step = patched")


def _run_example(*args: str) -> str:
    r = _example_process(*args)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize("model,args,batch,min_accuracy", [
    ("digits", [], 128, 0.3),
    ("wide", ["--samples", "8192", "--batch-size", "512", "--granularity", "64"], 512, 0.15),
])
def test_example_trains_on_two_devices(model, args, batch, min_accuracy):
    out = _run_example("--model", model, "--epochs", "3", *args)
    assert f"model {model}:" in out and f"batch {batch}," in out
    epochs = re.findall(r"^epoch (\d+): loss ([0-9.]+),\s+\d+ samples/s, shards \(fl:0 / fl:1\): (.*)$", out, re.M)
    assert [int(e[0]) for e in epochs] == [1, 2, 3], out
    losses = [float(e[1]) for e in epochs]
    assert losses[-1] < losses[0], losses
    for _, _, shards in epochs:  # "[a, b] xN, [c, d] xM": each split covers the whole batch
        for a, b, n in re.findall(r"\[(\d+), (\d+)\] x(\d+)", shards):
            assert int(a) + int(b) == batch and int(n) > 0, shards
            if "--granularity" in args:  # 512 is a multiple of it: so is every shard
                q = int(args[args.index("--granularity") + 1])
                assert int(a) % q == 0 and int(b) % q == 0, shards
    for device in ("fl:0", "fl:1"):
        assert re.search(rf"^{device} alone:\s+\d+ samples/s", out, re.M), out
    accuracy = float(re.search(r"^test accuracy ([0-9.]+)$", out, re.M).group(1))
    assert accuracy > min_accuracy, accuracy
    assert re.search(r"^pair \d+ samples/s .* x fastest alone \((meets|misses) >= 1\.0\), "
                     r"[0-9.]+ x sum \((meets|misses) >= 0\.9\)$", out, re.M), out
    per_epoch = re.search(r"^per epoch, pair / (fl:[01]) alone in the window after it: median ([0-9.]+), "
                          r"range ([0-9.]+)-([0-9.]+) over (\d+) epochs, >= 1\.0 in (\d+); "
                          r"fl:[01] alone's windows ranged (\d+)-(\d+) samples/s$", out, re.M)
    assert per_epoch, out
    low, median, high = float(per_epoch.group(3)), float(per_epoch.group(2)), float(per_epoch.group(4))
    assert 0 < low <= median <= high
    assert int(per_epoch.group(5)) == 2  # epochs 2 and 3: the first includes the calibration
    assert 0 <= int(per_epoch.group(6)) <= 2
    assert 0 < int(per_epoch.group(7)) <= int(per_epoch.group(8))
    assert "fallback ratio 0.0%" in out, out


def test_example_writes_every_step_to_its_history(tmp_path):
    history = tmp_path / "history.json"
    out = _run_example("--model", "wide", "--samples", "4096", "--batch-size", "512", "--epochs", "2",
                       "--ema", "0.1", "--history", str(history))
    import json
    data = json.loads(history.read_text())
    assert data["args"]["ema"] == 0.1
    assert [s["epoch"] for s in data["steps"]] == [1] * 6 + [2] * 6  # 3276 training rows: 6 batches of 512
    assert all(sum(s["shards"]) == 512 and s["seconds"] > 0 for s in data["steps"])
    assert all(len(s["device_seconds"]) == 2 for s in data["steps"])
    assert set(data["steps"][-1]["records"]) >= {"0", "1"}  # each device alone, from the calibration on
    assert set(data["alone_windows"]) == {"fl:0", "fl:1"} and all(len(w) == 1 for w in data["alone_windows"].values())
    assert data["balancer_history"] and f"history: 12 steps written to {history}" in out
    assert all(s["gc_ms"] >= 0 for s in data["steps"]) and "full garbage collections: " in out
    assert all(s["host"]["user_ms"] >= 0 and s["host"]["minor_faults"] >= 0 for s in data["steps"])
    # /proc is read per epoch, outside the timed steps (read per step, it slowed the H200's steps)
    assert all(s["host"]["runnable"] is None and s["host"]["compact_stall"] is None for s in data["steps"])
    assert len(data["epoch_hosts"]) == 2 and all(e["compact_stall"] >= 0 and e["runnable"] >= 1
                                                 for e in data["epoch_hosts"])
    assert "slow steps" in out
    backups = re.search(r"^backups: (\d+) shards computed by the master", out, re.M)
    assert backups and int(backups.group(1)) == data["steps"][-1]["backups"]


def test_a_slow_step_is_reported_with_what_the_host_did_during_it(tmp_path):
    """One step of the second epoch spins 0.3 s of CPU time in this process: the example names
    it among the slow steps, and its history holds that CPU time."""
    history = tmp_path / "history.json"
    before = _before_each_train_step("time", "if calls[0] == 9:\n"
                                             "    t0 = time.thread_time()\n"
                                             "    while time.thread_time() - t0 < 0.3: pass")
    r = _example_process("--model", "wide", "--samples", "4096", "--batch-size", "512", "--epochs", "2",
                         "--history", str(history), before=before)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    import json
    steps = json.loads(history.read_text())["steps"]
    spun = steps[8]
    assert spun["epoch"] == 2 and spun["seconds"] >= 0.3
    assert spun["host"]["user_ms"] + spun["host"]["system_ms"] >= 290
    reported = re.findall(r"^  epoch 2: (\d+\.\d) ms .*user_ms ([\d.]+).*; its epoch: compact_stall \d+", r.stdout, re.M)
    assert (f"{1e3 * spun['seconds']:.1f}", f"{spun['host']['user_ms']:g}") in reported, r.stdout


def test_the_history_gives_each_step_the_full_garbage_collections_that_began_in_it(tmp_path):
    """A step that runs a full collection (here gc.collect() at the start of every train_step
    from the second epoch on) has its milliseconds."""
    history = tmp_path / "history.json"
    before = _before_each_train_step("gc", "if calls[0] > 6: gc.collect()")
    r = _example_process("--model", "wide", "--samples", "4096", "--batch-size", "512", "--epochs", "2",
                         "--history", str(history), before=before)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    import json
    steps = json.loads(history.read_text())["steps"]
    assert all(s["gc_ms"] > 0 for s in steps[6:])  # (an automatic one may fall in the first epoch too)
    during = re.search(r"during the pair's steps: (\d+)", r.stdout)
    assert during and int(during.group(1)) == sum(s["gc_ms"] > 0 for s in steps) >= 6


def test_example_rejects_a_batch_larger_than_the_data():
    r = _example_process("--model", "wide", "--samples", "1000", "--batch-size", "4096", timeout=120)
    assert r.returncode != 0
    assert "--batch-size 4096 exceeds the 800 training rows" in r.stderr


def test_example_needs_an_epoch_after_the_calibration():
    r = _example_process("--model", "wide", "--samples", "4096", "--batch-size", "512", "--epochs", "1", timeout=120)
    assert r.returncode != 0
    assert "--epochs 1: at least 2 are needed" in r.stderr
    assert "Traceback" not in r.stderr


def test_example_with_a_fixed_split_runs_it_every_step_and_reduces_on_the_largest_share(tmp_path):
    history = tmp_path / "history.json"
    out = _run_example("--model", "wide", "--samples", "4096", "--batch-size", "512", "--epochs", "2",
                       "--split", "1", "3", "--history", str(history))
    assert "fixed split [1.0, 3.0] (no balancer), gradients reduced on fl:1" in out
    import json
    data = json.loads(history.read_text())
    assert [s["shards"] for s in data["steps"]] == [[128, 384]] * 12
    # Each device's forward/backward of its shard, to tell which one a slow step waited for.
    assert all(all(t is not None and 0 < t <= s["seconds"] for t in s["device_seconds"]) for s in data["steps"])
    assert data["args"]["split"] == [1.0, 3.0]


def test_example_rejects_a_split_without_one_proportion_per_device():
    r = _example_process("--model", "wide", "--samples", "4096", "--batch-size", "512", "--split", "1", timeout=120)
    assert r.returncode != 0 and "--split needs one proportion per device (2), got 1" in r.stderr
