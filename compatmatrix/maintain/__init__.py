"""Keeping the matrix up to date (the edge: network, venvs, installs, children): `compat matrix update` reads the
registries (registry.py) and keeps what matrix/harvest.py derives in the overlay or a matrix file (update.py, write.py);
`--health` reads what matrix/health.py judges (health_read.py); `compat matrix verify` tries a pairing in a throw-away
venv (verify.py). The pure parts they stand on stay in matrix/."""
