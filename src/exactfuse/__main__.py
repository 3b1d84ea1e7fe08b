import sys

from exactfuse.cli import main

sys.exit(main())
