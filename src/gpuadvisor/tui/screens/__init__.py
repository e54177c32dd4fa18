"""One module per wizard step; each screen reads and writes the app's shared state."""
