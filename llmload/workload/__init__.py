"""What is sent: datasets, the deterministic prompt stream and arrival schedules."""
