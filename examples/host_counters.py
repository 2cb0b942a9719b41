"""What the host did during one training step, for telling a stalled step's cause: this
process's CPU time and page faults and context switches (getrusage, every thread together),
the kernel's memory compaction stalls and reclaim scans (/proc/vmstat), how many threads
were runnable on the machine (/proc/loadavg) at the end, the time the hypervisor took from
the machine's CPUs (steal, /proc/stat), and each thread of this process's user and system
time and time spent runnable but waiting for a CPU (/proc/self/task/*/stat and schedstat).

    before = HostCounters.read()
    ...                                   # the step
    delta = HostCounters.read().since(before)   # a dict of plain numbers, for a JSON history

`read()` costs about 1 µs (getrusage alone); `read(proc=True)` adds the /proc files, which
cost 35 µs here but about 0.2 ms each on the H200 machine (16 cores): read per step there,
they slowed its 11 ms steps by 0.45 ms, enough to turn 1.01 x the GPU alone into 0.97 x. So
the example reads them per epoch, outside its timed steps. Elsewhere the /proc fields are None.
"""
from __future__ import annotations

import os
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


def _steal_ms() -> float | None:
    """CPU time the hypervisor gave other guests while this machine's CPUs wanted to run,
    summed over the CPUs (the 8th number of /proc/stat's "cpu" line), in ms."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return 1e3 * int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _thread_times() -> dict[int, tuple[str, float, float, float]] | None:
    """Each thread of this process: (name, user ms, system ms, ms runnable but not running)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    tick_ms = 1e3 / os.sysconf("SC_CLK_TCK")
    times = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                wait_ns = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended, or no schedstat
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
        times[int(tid)] = (name, int(rest[11]) * tick_ms, int(rest[12]) * tick_ms, wait_ns / 1e6)
    return times


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
    steal_ms: float | None = None
    threads: dict[int, tuple[str, float, float, float]] | None = None

    @staticmethod
    def read(proc: bool = False) -> "HostCounters":
        """getrusage's counters, and with `proc` those read from /proc (else None)."""
        r = resource.getrusage(resource.RUSAGE_SELF)
        if not proc:
            return HostCounters(r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt, r.ru_nvcsw, r.ru_nivcsw,
                                None, None)
        return HostCounters(r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_majflt, r.ru_nvcsw, r.ru_nivcsw,
                            _vmstat(), _runnable_threads(), _steal_ms(), _thread_times())

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
        have_steal = self.steal_ms is not None and before.steal_ms is not None
        delta["steal_ms"] = round(self.steal_ms - before.steal_ms, 1) if have_steal else None
        delta["threads"] = self._thread_deltas(before)
        return delta

    def _thread_deltas(self, before: "HostCounters") -> list[list] | None:
        """[tid, name, user ms, system ms, runnable-waiting ms] of each thread that ran since
        `before` (one that started since counts from zero), the most CPU time first."""
        if self.threads is None or before.threads is None:
            return None
        rows = []
        for tid, (name, user, system, wait) in self.threads.items():
            _, user0, system0, wait0 = before.threads.get(tid, (name, 0.0, 0.0, 0.0))
            if user - user0 or system - system0 or wait - wait0:
                rows.append([tid, name, round(user - user0, 1), round(system - system0, 1), round(wait - wait0, 2)])
        return sorted(rows, key=lambda r: -(r[2] + r[3]))
