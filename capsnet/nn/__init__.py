"""The networks: layers, the routing algorithms (each in a file named for it, sharing `capsnet.nn.routing`), the
CapsNet, the EM network and the CNN baseline, their configs and losses, the contract each family declares
(`capsnet.nn.family`) and the registry of the shipped families (`capsnet.nn.registry`)."""
