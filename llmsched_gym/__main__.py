"""``python -m llmsched_gym`` runs the CLI."""

import sys

from llmsched_gym.cli.main import main

sys.exit(main())
