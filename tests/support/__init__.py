"""Helpers for the test suite: finding or starting the servers tests run against."""
