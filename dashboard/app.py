"""CapsNet Explorer: `streamlit run dashboard/app.py`.

The entry point only sets up the page, the shared session state, the state a link carries
(`dashboard.links`) and the sidebar, then hands over to the page chosen in `st.navigation`.
Pages live in dashboard/app_pages/ (not pages/, which would switch on Streamlit's legacy
automatic page discovery). Everything is local: the icon is a file here, so the app works offline.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from capsnet.nn import em_native
from dashboard import links, models, pages, sidebar, state

em_native.show_builds_with(st.spinner)  # the EM kernel's first build, where a reading waits on it, as a spinner
state.freeze_imports()  # once per process: Streamlit's collection after each run then skips what the imports built

sidebar.write_to_main()  # never on the stack that the last fragment run (the sidebar's progress panel) left
st.set_page_config(
    page_title="CapsNet Explorer",
    page_icon=str(Path(__file__).with_name("icon.png")),
    layout="wide",
    initial_sidebar_state="expanded",
    menu_items={
        "About": "CapsNet Explorer: Capsule Networks (Sabour, Frosst & Hinton 2017), drawn, routed and trained."
    },
)
state.init()

entries = models.checkpoint_entries(str(state.checkpoints_dir()), str(state.runs_root()))
links.read_link(entries)
chosen = state.chosen_checkpoint(entries)
links.follow_the_model(chosen)
views = state.serve_views_for(chosen)  # each page's view for the chosen model's routing, at the page's own URL
PAGES = {
    section: [
        st.Page(
            p.path_for(views),
            title=p.title,
            icon=p.icon,
            **({"url_path": p.url_path} if p.url_path else {"default": True}),
        )
        for p in members
    ]
    for section, members in pages.SECTIONS.items()
}
page = st.navigation(PAGES)
state.note_page(page.url_path, chosen.network if chosen is not None else None)
st.sidebar.caption("CapsNet Explorer · [Sabour, Frosst & Hinton 2017](https://arxiv.org/abs/1710.09829)")
sidebar.render()
links.write_link(state.chosen_checkpoint(entries), page.url_path)
links.show_notices()
page.run()
