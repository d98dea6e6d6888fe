"""Batching: tokenized rows and the collators that pad them; imports no task type."""
