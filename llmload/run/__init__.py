"""The master/worker contract as plain values: the plan, the run clock and the wire format."""
