"""On-call operations: servers that outlive specmon (start, ps, stop, switch) and re-attaching to them."""
