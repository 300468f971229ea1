"""`infertop watch`: the headless flight recorder (docs/watch.md). `ring.py` the last
seconds in memory and the incident files written from them, `loop.py` the loop itself."""
