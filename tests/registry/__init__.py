"""Tests of the model registry and its CLI."""
