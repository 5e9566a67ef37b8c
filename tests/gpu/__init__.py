"""The prepared GPU check (``scripts/gpu-check.sh``, docs/gpu-check.md): the product's GPU paths
through its real front doors, one check a function, each PASS, FAIL or SKIP with its figures."""
