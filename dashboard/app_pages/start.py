"""Start here: a guided path through the pages for someone who has just read the paper."""

from __future__ import annotations

import streamlit as st

from capsnet.runs import catalog
from dashboard import figures, guided_path, models, state

st.title("Start here", anchor=False)
primer, picture = st.columns([3, 2], vertical_alignment="center")
primer.markdown(guided_path.START_PRIMER)
with picture:
    st.plotly_chart(figures.capsule_primer_figure(), key="start_primer", config={"displayModeBar": False})
st.markdown(guided_path.START_INTRO)
visited = state.visited_pages()
done = sum(step.visit in visited for step in guided_path.GUIDED_PATH)
st.progress(
    done / len(guided_path.GUIDED_PATH), text=f"{done} of {len(guided_path.GUIDED_PATH)} steps visited in this session"
)
entries = models.checkpoint_entries(str(state.checkpoints_dir()), str(state.runs_root()))
for number, step in enumerate(guided_path.GUIDED_PATH, start=1):
    seen = step.visit in visited
    with st.container(border=True, key=f"step_{number}"):
        head, link = st.columns([1.5, 1], vertical_alignment="center")  # the longest link whole at 1,100 px
        head.markdown(f"**{number}. {step.title}**" + ("  \n:green[:material/check_circle: visited]" if seen else ""))
        if step.network is None:  # the page with whichever model is chosen
            link.page_link(state.page_path(step.page), label=f"Open {step.page.title}", icon=step.page.icon)
        else:  # the page with that network's model: the shipped one first, else the newest run's
            other = catalog.trained_on("mnist", [e for e in entries if e.network == step.network])
            if other is None:
                link.caption(f"No {step.network.upper()} model here yet: `python -m capsnet train --network "
                             f"{step.network}` trains one.")  # fmt: skip
            elif link.button(f"Open {step.page.title} with it", key=f"open_step_{number}", icon=step.page.icon):
                if state.chosen_path() != str(other.path):
                    state.switch_checkpoint(other.path)  # the way back is one click on the page
                st.switch_page(state.page_path(step.page))
        st.markdown(step.do)
        st.caption(f"Look for: {step.notice}")
st.markdown(guided_path.START_AFTER)
