#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_plugin_table: fl_device_ops-shaped tables (complete, short,
wrong major, a NULL required entry) followed by kernel entries (valid, duplicate, NULL fn, bad
name, newer-minor stride). Layout from abi/fl_abi.h on LP64: fl_device_ops is 248 bytes
(struct_size, abi_major, abi_minor, plugin_name, plugin_version, then 28 function pointers);
fl_kernel_entry is 48 bytes (struct_size, op, dtype_mask, flags, reserved0, fn, kernel_data)."""
import os
import struct
import sys

OPS_SIZE, ENTRY_SIZE, MIN_SIZE = 248, 48, 240
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "plugin_table")
os.makedirs(out, exist_ok=True)


def table(struct_size=OPS_SIZE, major=1, minor=0, name=1 | (4 << 1), null_slot=None, length=OPS_SIZE):
    fns = [0x1000 + 8 * i for i in range(28)]
    if null_slot is not None:
        fns[null_slot] = 0
    blob = struct.pack("<QIIQQ", struct_size, major, minor, name, 0) + struct.pack("<28Q", *fns)
    return blob[:length]


def entry(op_selector, fn=0x2000, struct_size=ENTRY_SIZE, mask=1):
    # op_selector % 3: 0 NULL, 1 a name from the list ((sel >> 2) picks it), 2 bytes of the entry.
    return struct.pack("<QQQIIQQ", struct_size, op_selector, mask, 0, 0, fn, 0)


seeds = {
    "complete": table() + entry(1 | (0 << 2)) + entry(1 | (1 << 2)),
    "duplicate_and_bad": table() + entry(1) + entry(1 | (2 << 2)) + entry(1 | (3 << 2)) + entry(1, fn=0) + entry(0),
    "newer_minor_stride": table(minor=1) + entry(1, struct_size=64) + entry(1 | (1 << 2), struct_size=64),
    "short_struct": table(struct_size=MIN_SIZE - 8),
    "min_struct": table(struct_size=MIN_SIZE, length=MIN_SIZE),
    "wrong_major": table(major=2),
    "null_required": table(null_slot=7),
    "null_name": table(name=0),
    "huge_struct_size": table(struct_size=1 << 40),
    "truncated": table()[:20],
    "entry_bytes_op": table() + entry(2 | (13 << 2)),
}
for name, blob in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(blob)
print(f"{len(seeds)} seeds in {out}")
