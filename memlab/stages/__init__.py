"""Stage families. Each ``<family>/base.py`` declares the family's In/Out dataclasses once;
its implementations (prompted, rule-based, neural) sit beside it."""
