"""Turn a resolution into an installed environment: indexes, wheel files, plan, installer, restore."""

#: The install journal, next to site-packages while an install runs (install/transaction.py); named here, where the
#: static checks can find it without importing the transaction (packages.interrupted-install).
JOURNAL_NAME = ".compat-install-journal.json"
