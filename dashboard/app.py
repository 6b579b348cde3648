"""CapsNet Explorer: `streamlit run dashboard/app.py`.

The entry point only sets up the page, the shared session state and the sidebar,
then hands over to the page chosen in `st.navigation`. Pages live in
dashboard/app_pages/ (not pages/, which would switch on Streamlit's legacy
automatic page discovery).
"""

from __future__ import annotations

import streamlit as st

from dashboard import sidebar, state

st.set_page_config(
    page_title="CapsNet Explorer",
    page_icon=":material/blur_on:",
    layout="wide",
    initial_sidebar_state="expanded",
    menu_items={
        "About": "CapsNet Explorer: Capsule Networks (Sabour, Frosst & Hinton 2017), drawn, routed and trained."
    },
)
state.init()

PAGES = [
    st.Page("app_pages/draw.py", title="Draw", icon=":material/draw:", default=True),
    st.Page("app_pages/routing.py", title="Routing", icon=":material/hub:", url_path="routing"),
    st.Page("app_pages/dimensions.py", title="Capsule dimensions", icon=":material/tune:", url_path="dimensions"),
    st.Page("app_pages/training.py", title="Training runs", icon=":material/monitoring:", url_path="training"),
    st.Page("app_pages/evaluate.py", title="Evaluate", icon=":material/fact_check:", url_path="evaluate"),
]

page = st.navigation(PAGES)
state.note_page(page.url_path)
st.sidebar.caption("CapsNet Explorer · [Sabour, Frosst & Hinton 2017](https://arxiv.org/abs/1710.09829)")
sidebar.render()
page.run()
