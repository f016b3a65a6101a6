import sys

from ttj.cli import main

sys.exit(main())
