import sys

from exactfuse_cli import main

sys.exit(main())
