import sys

from pzq.node.main import main

sys.exit(main())
