import sys

from ttj.demo.run import main

sys.exit(main())
