"""tools/gpu/probe_switch_in.py on two CPU-plugin devices (FL_CPU_DEVICES=2): it alternates
the fast device alone with the fixed pair split, as many steps per phase as asked, and its
JSON rows say which split each step ran and, for pair steps, the step's timeline marks. The
times themselves are printed, not asserted."""
from __future__ import annotations

import json

from conftest import REPO, run_python


def test_probe_alternates_alone_and_pair(tmp_path):
    out_json = tmp_path / "switch.json"
    args = ["--devices", "fl:0", "fl:1", "--batch-size", "256", "--run", "2", "--cycles", "3", "--pin",
            "--no-gc", "--json", str(out_json)]
    code = ("import runpy, sys; sys.argv = ['probe_switch_in.py'] + %r; "
            "runpy.run_path(%r, run_name='__main__')") % (args, str(REPO / "tools" / "gpu" / "probe_switch_in.py"))
    r = run_python(code, env={"FL_CPU_DEVICES": "2"}, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "garbage collector off" in r.stdout
    assert "alone: first step" in r.stdout and "pair: first step" in r.stdout
    rows = json.loads(out_json.read_text())
    assert len(rows) == 3 * 2 * 2
    expected = [(cycle, phase, position) for cycle in range(3) for phase in ("alone", "pair") for position in range(2)]
    assert [(row["cycle"], row["phase"], row["position"]) for row in rows] == expected
    for row in rows:
        assert row["ms"] > 0
        if row["phase"] == "alone":  # the fast device alone: no shard for fl:0, no pair timeline
            assert row["shards"] == [0, 256]
            assert not any(key.startswith("dev") for key in row)
        else:  # 1 / 16 of the batch on the slow device
            assert row["shards"] == [16, 240]
            assert 0 < row["dev0_synced"] <= row["joined"] <= row["optimizer"] <= row["ms"] + 1e-6
