"""Typed events and the session timeline: what collectors produce and analysis consumes."""
