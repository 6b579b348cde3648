"""Training runs: the runs of this machine, their curves side by side, live while one goes on."""

from __future__ import annotations

import streamlit as st

from capsnet.data.datasets import dataset_info
from capsnet.errors import CapsNetError
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.nn.registry import named
from capsnet.runs import processes
from capsnet.training import watch
from capsnet.training.acceleration import Acceleration
from capsnet.training.folder import run_folders
from capsnet.training.options import TrainOptions
from capsnet.training.recipes import RECIPES
from dashboard import figures, state, texts, training_texts
from dashboard.figures import training as training_figures

# symbols every text font draws (an emoji needs an emoji font, and shows as an empty box without one)
STATUS_ICONS = {"running": "▶", "starting": "…", "finished": "✓", "stopped": "‖", "failed": "✗"}
LIVE_S = 2.0  # refresh while a run is going on
IDLE_S = 4.0  # refresh otherwise: a run started elsewhere (the sidebar, a terminal) shows up within this
COMPARED = "compare_runs"  # the multiselect's key: the runs whose curves are drawn
SEEN = "compare_seen"  # the runs the page has already listed (a new one joins the comparison by itself)
LIVE_STATUSES = ("running", "starting")
LIVE = "training_page_live"  # whether a run was going on at the fragment's last refresh
WATCH_RUN = "watch_run"  # the run whose window is shown
WATCH_STEP = "watch_step"  # the snapshot shown, by its label ("epoch 3")
WATCH_LATEST = "watch_latest"  # the newest snapshot's label at the last refresh: the slider follows it while there


def _resume(name: str) -> None:
    try:
        run = processes.resume_run(name, state.runs_root())
    except (ValueError, CapsNetError) as error:
        st.session_state["resume_message"] = ("error", str(error))
        return
    state.watch_run(run.name)
    st.session_state["resume_message"] = ("success", f"Resumed {run.name} (pid {run.pid}).")


def _model_label(run: processes.RunSummary) -> str:
    """The network and its preset: "paper", "tiny", "CNN paper" for the baseline, "EM small" ("?" for a damaged
    args.json)."""
    preset = TrainOptions.from_dict(run.args).preset
    preset = preset if isinstance(preset, str) else "?"
    if run.network is None:
        return "?"
    return f"{run.network.short} {preset}".strip()


def _computed(args: dict[str, object]) -> str:
    """How the run computes, from the choice its args.json records: "bf16 autocast, compiled", "float32" ("—" before
    the trainer has chosen, or for a run from before choices were recorded)."""
    chosen = args.get("acceleration")
    try:
        return Acceleration.from_dict(chosen).summary() if isinstance(chosen, dict) else "—"
    except ValueError:
        return "—"


def _table(all_runs: list[processes.RunSummary]) -> list[dict[str, object]]:
    """One row per run; a run folder that cannot be read costs its own row (with the reason), never the table."""
    rows = []
    for run in all_runs:
        try:
            rows.append(_row(run))
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            rows.append({"run": run.name, "status": f"{STATUS_ICONS['failed']} unreadable: {type(error).__name__}"})
    return rows


def _row(run: processes.RunSummary) -> dict[str, object]:
    last = run.metrics[-1] if run.metrics else {}
    seconds = sum(float(m.get("seconds") or 0.0) for m in run.metrics)
    progress = ""
    if run.status == "running" and run.progress is not None:
        p = run.progress
        progress = f"epoch {p.epoch}/{p.epochs} · batch {p.batch}/{p.batches} · ETA {texts.format_duration(p.eta_s)}"
    examples = run.args.get("train_size")
    return {
        "run": run.name,
        "status": f"{STATUS_ICONS.get(run.status, '')} {run.status}",
        "dataset": run.dataset,
        "model": _model_label(run),
        "epochs": f"{run.epochs_done}/{run.epochs_total or '?'}",
        "now": progress,
        "best test accuracy": run.best_accuracy,
        "last train loss": last.get("train_loss"),
        "training time": texts.format_duration(seconds) if run.metrics else "—",
        # one type per column (text): a column of numbers and "all" makes pyarrow raise on every rerun
        "examples": f"{examples:,}" if isinstance(examples, int) and not isinstance(examples, bool) else "all",
        "computed": _computed(run.args),  # why two runs of one network differ in speed (compiled or not)
    }


def _follow_new_runs(all_runs: list[processes.RunSummary]) -> None:
    """The comparison's selection: the newest runs at first; later, every run that starts joins it."""
    names = [r.name for r in all_runs]
    seen = st.session_state.get(SEEN)
    if seen is None or COMPARED not in st.session_state:
        live = [r.name for r in all_runs if r.status in LIVE_STATUSES]
        finished = [r.name for r in all_runs if r.metrics]
        st.session_state[COMPARED] = list(dict.fromkeys(live + finished[:3]))[:4]
    else:
        new = [r.name for r in all_runs if r.name not in seen]
        st.session_state[COMPARED] = [n for n in st.session_state[COMPARED] if n in names] + new
    st.session_state[SEEN] = set(names)


def _live_page() -> None:
    """Table, selection and curves, redrawn every few seconds so that runs are followed as they go."""
    message = st.session_state.pop("resume_message", None)  # from a Resume button: this fragment's own rerun
    if message:
        (st.error if message[0] == "error" else st.success)(message[1])
    all_runs = processes.list_runs(state.runs_root())
    live = any(r.status in LIVE_STATUSES for r in all_runs)
    was_live = st.session_state.get(LIVE)
    st.session_state[LIVE] = live
    if was_live is not None and live != was_live:
        st.rerun()  # a run started or ended: the whole page again, so that the refresh rate follows
    if not all_runs:
        st.info(
            "No training runs yet. Start one in the sidebar (**Train a model**): with the tiny model and a few "
            "thousand examples an epoch takes a minute or two on a CPU. It appears here at once, and its curves "
            "epoch by epoch.",
            icon=":material/model_training:",
        )
        return
    st.dataframe(
        _table(all_runs),
        hide_index=True,
        key="runs_table",
        column_config={
            "best test accuracy": st.column_config.NumberColumn(format="percent"),
            "last train loss": st.column_config.NumberColumn(format="%.4f"),
        },
    )
    _follow_new_runs(all_runs)
    chosen = st.multiselect(
        "Runs to compare",
        [r.name for r in all_runs],
        key=COMPARED,
        help="The runs whose curves are drawn side by side. A run that starts while this page is open joins them.",
    )
    by_name = {r.name: r for r in all_runs}
    selected = {name: by_name[name].metrics for name in chosen if name in by_name}
    if not selected:
        st.info("Pick one or more runs above.")
    elif not any(selected.values()):
        st.info("No epoch has finished yet in the chosen runs: the curves appear after the first one.")
    else:
        st.plotly_chart(figures.training_curves(selected), key="training_curves", config={"displayModeBar": False})
    for run in all_runs:
        if run.status == "failed":
            with st.expander(f"{run.name} failed: {run.reason}", icon=":material/error:"):
                st.code(run.folder.log_tail(40) or "(no log)", language=None)
                if run.resumable:
                    st.button("Resume", key=f"resume_{run.name}", on_click=_resume, args=(run.name,))
        elif run.status == "stopped" and run.resumable:
            with st.expander(f"{run.name} stopped after {run.epochs_done} epoch(s)", icon=":material/pause_circle:"):
                st.markdown("It was cancelled; its training state was saved, so it can go on where it stopped.")
                st.button("Resume", key=f"resume_{run.name}", on_click=_resume, args=(run.name,), type="primary")


@st.cache_data(max_entries=8, show_spinner=False)
def _read_window(path: str, stamp: tuple[int, int]) -> watch.WindowHistory | None:
    """A run's window, read again only when its file changed (`stamp`)."""
    return watch.read_window(path)


def _class_names(dataset: str, count: int) -> list[str]:
    try:
        names = list(dataset_info(dataset).classes)
    except (ValueError, KeyError):
        names = []
    return names if len(names) == count else [str(c) for c in range(count)]


def _window() -> None:
    """A run's window at one of its snapshots, with a slider over them that follows the newest (its own fragment:
    a slider move redraws the window alone)."""
    root = state.runs_root()
    stamps = {f.name: (f, watch.window_stamp(f)) for f in run_folders(root)}  # newest first
    names = [name for name, (_, stamp) in stamps.items() if stamp is not None]
    if not names:
        return
    st.subheader("Watch the capsules learn", anchor=False)
    if st.session_state.get(WATCH_RUN) not in names:  # the sidebar's run, else the one going on, else the newest
        active = processes.active_run(root)
        live = [active.run_dir.name] if active is not None and active.run_dir.name in names else []
        watched = state.watched_run()
        st.session_state[WATCH_RUN] = watched if watched in names else (live or names)[0]
    name = st.selectbox("Run to watch", names, key=WATCH_RUN, help="The runs that keep a window, newest first.")
    folder, stamp = stamps[name]
    history = _read_window(str(folder.path), stamp) if stamp is not None else None
    if history is None:
        st.info("No snapshot of this run's window yet: the first is taken before its first batch.")
        return
    st.markdown(training_texts.training_window(history.network, history.m_plus, history.m_minus, EMCapsNetConfig()))
    labels = [history.label(s) for s in range(len(history))]
    shown, latest = st.session_state.get(WATCH_STEP), st.session_state.get(WATCH_LATEST)
    if shown not in labels or shown == latest:  # at the newest snapshot: stay there as new ones come
        st.session_state[WATCH_STEP] = labels[-1]
    st.session_state[WATCH_LATEST] = labels[-1]
    if len(labels) > 1:
        chosen = st.select_slider(
            "Snapshot", labels, key=WATCH_STEP, help=f"At most {watch.KEEP} snapshots, spread over the whole run."
        )
    else:
        chosen = labels[0]
    s = labels.index(chosen)
    names_k = _class_names(history.dataset, history.scores.shape[2])
    margins = history.margins
    recon = history.reconstructions[s] if history.reconstructions is not None else None
    net = named(history.network)
    score_name = texts.SCORE_AXES[net.score_symbol] if net is not None else "class score"
    figure = training_figures.training_window(
        history.images, history.scores[s], recon, history.labels, history.predictions(s), names_k, margins,
        score_name=score_name,
    )  # fmt: skip
    st.plotly_chart(figure, key="training_window", config={"displayModeBar": False})
    right = int(history.right(s).sum())
    kind = net.scores if net is not None else "class scores"
    st.caption(f"{name}, {chosen}: {right} of {len(history.labels)} right; bars are {kind}.")


st.title("Training runs", anchor=False)
st.markdown(training_texts.training(CapsNetConfig.preset(TrainOptions().preset), EMCapsNetConfig(), RECIPES))
st.session_state[LIVE] = None
every = LIVE_S if processes.active_run(state.runs_root()) else IDLE_S
st.fragment(run_every=every)(_live_page)()
st.fragment(run_every=every)(_window)()
