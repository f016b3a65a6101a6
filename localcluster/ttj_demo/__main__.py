import sys

from ttj_demo.run import main

sys.exit(main())
