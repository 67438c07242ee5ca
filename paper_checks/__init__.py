"""Placeholder: filled by a later issue."""
