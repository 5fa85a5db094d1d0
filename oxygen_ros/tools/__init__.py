"""Tools around the oxygen node: share lookups, viewer configs, the Foxglove bridge."""
