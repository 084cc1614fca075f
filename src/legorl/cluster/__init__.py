"""`cluster.runtime = "ray"`: every role of a run as Ray actors placed over a cluster (docs/cluster.md)."""
