"""Training runs: loss and accuracy curves of the running and past runs, side by side."""

from __future__ import annotations

import streamlit as st

from capsnet import runs
from dashboard import figures, state, texts

STATUS_ICONS = {"running": "🟢", "starting": "🟡", "finished": "✅", "stopped": "⏸️", "failed": "❌"}


def _resume(name: str) -> None:
    try:
        run = runs.resume_run(name, state.runs_root())
    except (ValueError, runs.RunError) as error:
        st.session_state["resume_message"] = ("error", str(error))
        return
    st.session_state[state.WATCHED_RUN] = run.name
    st.session_state["resume_message"] = ("success", f"Resumed {run.name} (pid {run.pid}).")


def _table(all_runs: list[runs.RunSummary]) -> list[dict[str, object]]:
    rows = []
    for run in all_runs:
        last = run.metrics[-1] if run.metrics else {}
        seconds = sum(float(m.get("seconds") or 0.0) for m in run.metrics)
        rows.append(
            {
                "run": run.name,
                "status": f"{STATUS_ICONS.get(run.status, '')} {run.status}",
                "dataset": run.dataset,
                "model": run.args.get("preset") or run.dataset,
                "epochs": f"{run.epochs_done}/{run.epochs_total or '?'}",
                "best test accuracy": run.best_accuracy,
                "last train loss": last.get("train_loss"),
                "training time": texts.format_duration(seconds) if run.metrics else "—",
                "examples": run.args.get("train_size") or "all",
            }
        )
    return rows


st.title("Training runs", anchor=False)
st.markdown(texts.TRAINING)

all_runs = runs.list_runs(state.runs_root())
message = st.session_state.pop("resume_message", None)
if message:
    (st.error if message[0] == "error" else st.success)(message[1])

if not all_runs:
    st.info(
        "No training runs yet. Start one in the sidebar (**Train a model**): with the tiny model and a few thousand "
        "examples an epoch takes a minute or two on a CPU. Its curves appear here epoch by epoch.",
        icon=":material/model_training:",
    )
    st.stop()

st.dataframe(
    _table(all_runs),
    hide_index=True,
    key="runs_table",
    column_config={
        "best test accuracy": st.column_config.NumberColumn(format="percent"),
        "last train loss": st.column_config.NumberColumn(format="%.4f"),
    },
)

with_metrics = [r.name for r in all_runs if r.metrics]
default = [r.name for r in all_runs if r.status in ("running", "starting")] + with_metrics[:3]
chosen = st.multiselect(
    "Runs to compare",
    [r.name for r in all_runs],
    default=list(dict.fromkeys(default))[:4],
    key="compare_runs",
    help="Pick the runs whose curves to draw side by side.",
)


@st.fragment(run_every=3.0 if any(r.status in ("running", "starting") for r in all_runs) else None)
def curves() -> None:
    """The curves, refreshed every few seconds while a run is going on."""
    by_name = {r.name: r for r in runs.list_runs(state.runs_root())}
    selected = {name: by_name[name].metrics for name in chosen if name in by_name}
    if not selected:
        st.info("Pick one or more runs above.")
        return
    if not any(selected.values()):
        st.info("No epoch has finished yet in the chosen runs: the curves appear after the first one.")
        return
    st.plotly_chart(figures.training_curves(selected), key="training_curves", config={"displayModeBar": False})
    for name in chosen:
        run = by_name.get(name)
        if run is not None and run.status == "running" and run.progress:
            p = run.progress
            st.caption(
                f"{name}: epoch {p.get('epoch')}/{p.get('epochs')}, batch {p.get('batch')}/{p.get('batches')}, "
                f"ETA {texts.format_duration(p.get('eta_s'))}"
            )


curves()

for run in all_runs:
    if run.status == "failed":
        with st.expander(f"❌ {run.name} failed: {run.reason}", icon=":material/error:"):
            st.code(runs.log_tail(run.path, 40) or "(no log)", language=None)
            if run.resumable:
                st.button("Resume", key=f"resume_{run.name}", on_click=_resume, args=(run.name,))
    elif run.status == "stopped" and run.resumable:
        with st.expander(f"⏸️ {run.name} stopped after {run.epochs_done} epoch(s)", icon=":material/pause_circle:"):
            st.markdown("It was cancelled; its training state was saved, so it can go on where it stopped.")
            st.button("Resume", key=f"resume_{run.name}", on_click=_resume, args=(run.name,), type="primary")
