"""Report renderers, one module per format."""
