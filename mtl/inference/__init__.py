"""After training: the export folder, the transformers export per task, predictions."""
