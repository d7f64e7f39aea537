"""Turn a resolution into an installed environment: indexes, wheel files, plan, installer, restore."""
