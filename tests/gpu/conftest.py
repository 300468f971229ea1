# Scripts here are for GPU machines, run by hand (python tests/gpu/check_*.py); not collected.
collect_ignore_glob = ["check_*.py"]
