"""Findings are evidence; alerts are for people: grading findings into the one operator-facing alert stream."""
