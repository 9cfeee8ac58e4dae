"""The operator's routes (docs/design.md §13, §19), JSON first: who a key speaks for
(``keys``), approvals, runs, the overview, usage, the inventory of the configuration,
reload and replays (``admin``). The console's pages stand on these."""
