"""The hypervisor's steal on a shared VM, for the benches that time CPU work: a slow spell of the host shows up as
"steal" in /proc/stat, so a measurement can record how much of the machine was taken while it ran; and this
process's own CPU time, which the steal moves less than wall time."""

import resource


def cpu_s() -> float:
    "This process's CPU seconds, user and system, all threads."
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_ticks() -> tuple[int, int]:
    "(steal, total) CPU ticks of the machine from /proc/stat (Linux; (0, 1) elsewhere)."
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0, 1
    return (v[7] if len(v) > 7 else 0), sum(v)


def measured(fn):
    "`fn()`'s result and the share of the machine's CPU time that the hypervisor stole while it ran."
    s0, t0 = cpu_ticks()
    out = fn()
    s1, t1 = cpu_ticks()
    return out, (s1 - s0) / max(t1 - t0, 1)
