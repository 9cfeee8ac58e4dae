"""The tool loop (docs/design.md §10): rounds, decisions, running tools, hand-backs, and the
drivers that run it with or without streaming. It knows no surface's wire format."""
