import sys

from ratchet_stats.cli import main

sys.exit(main())
