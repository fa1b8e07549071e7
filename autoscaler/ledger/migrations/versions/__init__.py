"""One file per schema revision, named YEAR_MM_DD_REV_slug.py; each docstring says why."""
