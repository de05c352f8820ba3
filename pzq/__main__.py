import sys

from pzq.cli import main

sys.exit(main())
