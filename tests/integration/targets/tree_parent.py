"""A parent with a Python child that works and a non-Python child that sleeps; SIGTERM ends all."""

import signal
import subprocess
import sys
import time

children = [
    subprocess.Popen([sys.executable, "-c", "while True: sum(range(100_000))"]),
    subprocess.Popen(["sleep", "120"]),
]


def _stop(signum, frame):
    for c in children:
        c.kill()
        c.wait()
    sys.exit(0)


signal.signal(signal.SIGTERM, _stop)
signal.signal(signal.SIGINT, _stop)
while True:
    time.sleep(0.05)
