import sys

from megha.cli import main

sys.exit(main())
