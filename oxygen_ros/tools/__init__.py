"""Command-line tools built on the node's own code: replay, evaluation, demos."""
