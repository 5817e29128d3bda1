"""Many instances under one clock: routers, PD disaggregation, job orchestration (issue 5)."""
