"""Plotly figure builders for the dashboard: pure functions of arrays, no Streamlit calls.

Each builder takes NumPy arrays (as returned by `capsnet.readings.explain`) and returns a
`plotly.graph_objects.Figure`, so tests can check them without a browser. One module per
subject; the pages use them as `figures.<builder>`.
"""

from dashboard.figures.agreement import (
    coupling_distribution_figure,
    primary_coupling_figure,
    vote_overlay_figure,
    vote_share_figure,
    votes_figure,
)
from dashboard.figures.baseline import claim_figure, comparison_figure, robustness_figure
from dashboard.figures.capsules import capsule_primer_figure, dimension_profile_figure, lengths_bar, scores_bar
from dashboard.figures.em import (
    activations_bar,
    em_assignment_figure,
    em_child_windows_figure,
    em_class_routing_figure,
    em_fit_figure,
    em_layer_figure,
)
from dashboard.figures.equivariance import pose_figure, rotation_sweep_figure
from dashboard.figures.evaluation import confusion_figure, per_class_accuracy_figure
from dashboard.figures.images import (
    image_rows_figure,
    perturbation_figure,
    pixel_image,
    segmentation_image,
    tile_columns,
    tile_maps,
)
from dashboard.figures.routing import (
    TILE_SIDES,
    coupling_by_type_figure,
    coupling_maps_figure,
    iteration_lengths_figure,
    primary_lengths_figure,
)
from dashboard.figures.style import MARGIN_LABEL_SPACE, OTHER, WINNER
from dashboard.figures.training import MARKED_EPOCHS, TICKED_EPOCHS, training_curves

__all__ = [
    "scores_bar",
    "activations_bar",
    "em_assignment_figure",
    "em_child_windows_figure",
    "em_class_routing_figure",
    "em_fit_figure",
    "em_layer_figure",
    "primary_coupling_figure",
    "capsule_primer_figure",
    "MARGIN_LABEL_SPACE",
    "MARKED_EPOCHS",
    "OTHER",
    "TICKED_EPOCHS",
    "TILE_SIDES",
    "WINNER",
    "claim_figure",
    "comparison_figure",
    "confusion_figure",
    "coupling_distribution_figure",
    "coupling_maps_figure",
    "dimension_profile_figure",
    "image_rows_figure",
    "iteration_lengths_figure",
    "lengths_bar",
    "per_class_accuracy_figure",
    "perturbation_figure",
    "pixel_image",
    "pose_figure",
    "primary_lengths_figure",
    "robustness_figure",
    "rotation_sweep_figure",
    "coupling_by_type_figure",
    "segmentation_image",
    "tile_columns",
    "tile_maps",
    "training_curves",
    "vote_overlay_figure",
    "vote_share_figure",
    "votes_figure",
]
