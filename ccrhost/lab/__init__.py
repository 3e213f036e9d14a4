"""The emulated lab. Test and demo infrastructure only: nothing outside
``ccrhost.lab`` (and the lab inventory) imports it."""
