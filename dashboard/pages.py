"""The page registry: every page's file, title, icon and URL, in the sidebar's sections and order.

The entry point builds `st.navigation` from it, and every link to a page (a guard's pointer, a
notice's shortcuts) names the page here, so a page is renamed or moved in one place. A page may declare
its own view for a network routed another way (`views`): the entry point serves the chosen model's view
at the page's URL, and links find it through `dashboard.state.page_path`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageInfo:
    path: str  # relative to dashboard/, as st.Page and st.page_link take it: the page for networks routed by agreement
    title: str
    icon: str
    url_path: str  # "" for the default page
    # the page's own view for a network routed otherwise: (routing kind, its file), one page per file; the entry point
    # serves the chosen model's view at the page's URL
    views: tuple[tuple[str, str], ...] = ()

    def path_for(self, routing: str) -> str:
        """The file that shows this page for a network routed by `routing` (`Routing.kind`)."""
        return dict(self.views).get(routing, self.path)


DRAW = PageInfo("app_pages/draw.py", "Draw", ":material/draw:", "")
ROUTING = PageInfo(
    "app_pages/routing.py",
    "Routing",
    ":material/hub:",
    "routing",
    views=(("em", "app_pages/em_routing.py"), ("attention", "app_pages/attention_routing.py")),
)
DIMENSIONS = PageInfo("app_pages/dimensions.py", "Capsule dimensions", ":material/tune:", "dimensions")
TRANSFORM = PageInfo("app_pages/transform.py", "Transform lens", ":material/rotate_right:", "transform")
OVERLAP = PageInfo("app_pages/overlap.py", "Overlapping digits", ":material/layers:", "overlap")
TRAINING = PageInfo("app_pages/training.py", "Training runs", ":material/monitoring:", "training")
EVALUATE = PageInfo("app_pages/evaluate.py", "Evaluate", ":material/fact_check:", "evaluate")
ARCHITECTURE = PageInfo("app_pages/architecture.py", "Architecture", ":material/account_tree:", "architecture")
PLAYGROUND = PageInfo("app_pages/playground.py", "Routing playground", ":material/scatter_plot:", "playground")
ROUTING_MATTERS = PageInfo(
    "app_pages/routing_matters.py", "Where routing matters", ":material/alt_route:", "routing-matters"
)

START = PageInfo("app_pages/start.py", "Start here", ":material/school:", "start")

# the sidebar's sections, in order: learn the ideas, explore a trained model, train and measure one
SECTIONS = {
    "Learn": (START, ARCHITECTURE, PLAYGROUND),
    "Explore a model": (DRAW, ROUTING, DIMENSIONS, TRANSFORM, OVERLAP, ROUTING_MATTERS),
    "Train and measure": (TRAINING, EVALUATE),
}
PAGES = tuple(page for section in SECTIONS.values() for page in section)
INPUT_PAGES = (DRAW, ROUTING, ARCHITECTURE, DIMENSIONS, TRANSFORM)  # the pages that read the current 28x28 input
