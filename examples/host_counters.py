"""What the host did during one training step, for telling a stalled step's cause: this
process's CPU time and page faults and context switches (getrusage, every thread together),
the kernel's memory compaction stalls and reclaim scans (/proc/vmstat), and how many threads
were runnable on the machine (/proc/loadavg) at the end of the step.

    before = HostCounters.read()
    ...                                   # the step
    delta = HostCounters.read().since(before)   # a dict of plain numbers, for a JSON history

A read costs about 35 µs on Linux (mostly /proc/vmstat); elsewhere the /proc fields are None.
"""
from __future__ import annotations

import resource
from dataclasses import dataclass

# /proc/vmstat counters that grow when an allocation had to wait for the kernel: direct
# compaction (compact_stall), direct reclaim (pgscan_direct), and huge pages faulted in.
VMSTAT_FIELDS = ("compact_stall", "pgscan_direct", "thp_fault_alloc")


def _vmstat() -> dict[str, int] | None:
    try:
        with open("/proc/vmstat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    values = {}
    for line in text.split(b"\n"):
        name, _, value = line.partition(b" ")
        key = name.decode()
        if key in VMSTAT_FIELDS:
            values[key] = int(value)
    return values


def _runnable_threads() -> int | None:
    """The machine's runnable threads now (the 4th field of /proc/loadavg, "running/total")."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class HostCounters:
    user_s: float
    system_s: float
    minor_faults: int
    major_faults: int
    voluntary_switches: int
    involuntary_switches: int
    vmstat: dict[str, int] | None
    runnable: int | None

    @staticmethod
    def read() -> "HostCounters":
        r = resource.getrusage(resource.RUSAGE_SELF)
        return HostCounters(r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt, r.ru_nvcsw, r.ru_nivcsw,
                            _vmstat(), _runnable_threads())

    def since(self, before: "HostCounters") -> dict[str, float | int | None]:
        """The growth of each counter from `before` to this reading; `runnable` is this
        reading's own value (a level, not a count)."""
        delta: dict[str, float | int | None] = {
            "user_ms": round(1e3 * (self.user_s - before.user_s), 3),
            "system_ms": round(1e3 * (self.system_s - before.system_s), 3),
            "minor_faults": self.minor_faults - before.minor_faults,
            "major_faults": self.major_faults - before.major_faults,
            "voluntary_switches": self.voluntary_switches - before.voluntary_switches,
            "involuntary_switches": self.involuntary_switches - before.involuntary_switches,
            "runnable": self.runnable,
        }
        for key in VMSTAT_FIELDS:
            have = self.vmstat is not None and before.vmstat is not None and key in self.vmstat \
                and key in before.vmstat
            delta[key] = self.vmstat[key] - before.vmstat[key] if have else None
        return delta
