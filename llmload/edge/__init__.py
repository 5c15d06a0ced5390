"""The Locust edge: the only modules that import Locust (users, hooks, cluster, live, web UI)."""
