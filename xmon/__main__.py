import sys

from xmon.cli.main import main

sys.exit(main())
