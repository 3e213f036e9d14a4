"""The four verdict levels, in a module of their own.

The verdict code (model/status.py) reads the reason catalogue
(model/reasons.py), and the catalogue checks its entries' levels: both take
the words from here, so neither imports the other to get them.
"""

OK, WARN, FAIL, UNKNOWN = "OK", "WARN", "FAIL", "UNKNOWN"
