"""Options, their values and the frozen RunConfig: everything a run is told before it starts."""
