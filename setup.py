"""Packaging hook: install ``infertop-agent.pth`` at the top of site-packages.

The .pth line arms the in-process agent at interpreter start when ``INFERTOP_AGENT=1`` is set
(and does nothing otherwise), so processes started without ``infertop run`` can be armed by
their environment alone. Everything else is declared in pyproject.toml.
"""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = os.path.join("infertop", "agent", "infertop-agent.pth")


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, os.path.basename(PTH))
        self.mkpath(self.build_lib)
        shutil.copyfile(PTH, target)
        self._pth_outputs = [target]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return list(super().get_outputs(include_bytecode)) + [
            os.path.join(self.build_lib, os.path.basename(PTH))
        ]


setup(cmdclass={"build_py": BuildPyWithPth})
