"""The route handlers by resource; each module exports its route-table entries."""
