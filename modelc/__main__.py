import sys

from modelc.cli.main import main

sys.exit(main())
