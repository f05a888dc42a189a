import sys

from dtfkit.cli import main

sys.exit(main())
