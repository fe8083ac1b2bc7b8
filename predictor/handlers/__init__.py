"""Task handlers: one per task, picked by the manifest's ``task``."""
