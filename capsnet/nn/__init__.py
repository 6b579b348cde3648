"""The networks: layers, the routing algorithms (each in a file named for it), the CapsNet and its CNN baseline,
their configs and losses, and the registry that names them."""
