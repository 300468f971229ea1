"""Recordings: the ``.infertop`` file format, its writer and its reader."""
