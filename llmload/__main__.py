"""`python -m llmload` → the llmload command line."""

import sys

from llmload.cli import main

sys.exit(main())
