"""infertop: where a running PyTorch inference process spends its time.

Importing this package is cheap and has no side effects: it starts no thread, opens no
file and patches nothing. The one thing user code needs from it is :func:`stage`.
"""

from infertop.annotate import stage

__all__ = ["stage", "__version__"]
__version__ = "0.1.0"
