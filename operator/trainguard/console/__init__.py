"""The web console (later issue)."""
