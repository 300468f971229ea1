import sys

from infertop.cli import main

sys.exit(main())
