"""memlab.clock: intervals leave out the time the process was suspended."""

import os
import signal
import subprocess
import sys
import time

import pytest

from memlab import clock


def test_a_long_gap_between_ticks_counts_as_suspension(monkeypatch):
    monkeypatch.setattr(clock, "_suspended_s", 0.0)
    monkeypatch.setattr(clock, "_last_tick", 100.0)
    clock._tick(100.0 + clock.TICK_S)          # an ordinary tick
    clock._tick(100.0 + clock.TICK_S + 1.0)    # late, as under load: still not a suspension
    assert clock._suspended_s == 0.0
    clock._tick(100.0 + clock.TICK_S + 1.0 + 60.0)  # one minute without a tick
    assert clock._suspended_s == pytest.approx(60.0 - clock.TICK_S)


def test_active_seconds_runs_with_the_wall_clock_when_nothing_is_suspended():
    start, wall = clock.active_seconds(), time.monotonic()
    time.sleep(0.3)
    assert clock.active_seconds() - start == pytest.approx(time.monotonic() - wall, abs=0.05)


CHILD = """
import sys, time
from memlab import clock
clock.TICK_S, clock.SUSPENDED_AFTER_S = 0.05, 0.5
start, wall = clock.active_seconds(), time.monotonic()
print("ready", flush=True)
sys.stdin.readline()          # the parent stops and resumes us meanwhile
time.sleep(0.2)
print(f"{clock.active_seconds() - start:.3f} {time.monotonic() - wall:.3f}", flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX job control")
def test_a_stopped_and_continued_process_does_not_count_the_pause():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        active, wall = map(float, child.stdout.readline().split())
    finally:
        child.kill()
        child.wait()
    assert wall > 2.0
    assert active < 1.0, f"active {active:.2f} s of {wall:.2f} s wall: the 2 s pause was counted"
