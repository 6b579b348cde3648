"""Readings of a trained network: one input explained (routing trace, votes, stages), capsules redrawn, evaluation
views, novelty, equivariance, where routing matters, the routing playground, and the paper's claims."""
