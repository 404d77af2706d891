"""`python -m crawler`: the same command as `crawler` (crawler.cli.main)."""
import sys

from crawler.cli import main

sys.exit(main())
