"""End to end: examples/train_cnn.py's train() on fl:0 gives the CPU's losses and accuracy."""
from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO

pytest.importorskip("sklearn")
pytest.importorskip("tqdm")


def _load_example():
    spec = importlib.util.spec_from_file_location("train_cnn", REPO / "examples" / "train_cnn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_cnn_matches_cpu():
    mod = _load_example()
    kw = dict(epochs=2, batch_size=64, seed=0, lr=1e-3, quiet=True)
    fl = mod.train("fl:0", **kw)
    cpu = mod.train("cpu", **kw)
    assert len(fl["losses"]) == len(cpu["losses"]) > 40
    diffs = [abs(a - b) for a, b in zip(fl["losses"], cpu["losses"])]
    assert max(diffs) < 1e-4, max(diffs)
    assert fl["accuracy"] == cpu["accuracy"]
    assert fl["losses"][-1] < fl["losses"][0]
