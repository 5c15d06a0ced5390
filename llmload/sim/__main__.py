"""``python -m llmload.sim`` runs the simulator."""

from llmload.sim import main

raise SystemExit(main())
