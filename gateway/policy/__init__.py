"""What a request may do: tenants and their keys, model routing, narrowing, caps,
rate limits, the caller's identity and the policy point (docs/design.md §13)."""
