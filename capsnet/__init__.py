"""capsnet: the Capsule Network of Sabour, Frosst & Hinton (2017), trained, saved and explained."""

__version__ = "0.1.0"
