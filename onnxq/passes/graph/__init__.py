"""What every pass shares: the graph builder (one naming authority and weight cache per graph), the pass contract, typed operator signatures, subgraph bodies, and applying a set of plans."""
