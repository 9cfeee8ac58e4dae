"""What a request may do: tenants and their keys, model routing, narrowing, caps,
rate limits, the caller's identity and the policy point (DESIGN.md §13)."""
