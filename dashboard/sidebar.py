"""The sidebar on every page: model picker, "Train a model" form and live training progress."""

from __future__ import annotations

import streamlit as st

from capsnet import catalog, runs
from capsnet.checkpoint import trained_epochs
from capsnet.data import DATASETS
from capsnet.device import DEVICE_CHOICES
from dashboard import state, texts

PRESET_LABELS = {
    "paper": "Paper's CapsNet (8.2 M parameters)",
    "tiny": "Tiny CapsNet (quick demo)",
}


def render() -> None:
    """Draw the whole sidebar."""
    with st.sidebar:
        model_picker()
        train_form()
        progress_panel()


# ---------------------------------------------------------------- model picker


def _pick(key: str) -> None:
    st.session_state[state.MODEL_PATH] = st.session_state[key]


def model_picker() -> None:
    """Shipped checkpoints and finished runs; broken files are named, the others stay usable."""
    entries = state.checkpoint_entries(str(state.checkpoints_dir()), str(state.runs_root()))
    usable = [e for e in entries if not e.error]
    broken = [e for e in entries if e.error]
    st.subheader("Model", anchor=False)
    if not usable:
        st.session_state[state.MODEL_PATH] = None
        st.warning("No trained model yet. Train one below, or add `checkpoints/mnist.safetensors`.")
    else:
        paths = [str(e.path) for e in usable]
        labels = {str(e.path): e.label for e in usable}
        chosen = st.session_state.get(state.MODEL_PATH)
        if chosen not in paths:
            default = catalog.default_checkpoint(usable)
            chosen = str(default.path) if default else paths[0]
            st.session_state[state.MODEL_PATH] = chosen
        st.selectbox(
            "Checkpoint",
            paths,
            index=paths.index(chosen),
            format_func=lambda p: labels.get(p, p),
            key="checkpoint_picker",
            on_change=_pick,
            args=("checkpoint_picker",),
            help="Shipped models from checkpoints/ and the best model of each of your training runs.",
        )
        # the widget may have been reset by a changed list: the session value is the truth
        if st.session_state.get("checkpoint_picker") != chosen:
            st.session_state[state.MODEL_PATH] = chosen
        model = state.current_model(show_errors=True)
        if model is not None:
            info = model.info
            acc = info.get("test_accuracy")
            parts = [info.get("dataset_title") or model.dataset]
            if isinstance(acc, (int, float)):
                parts.append(f"test accuracy {100 * acc:.2f}%")
            epochs = trained_epochs(info)
            if epochs:
                parts.append(f"{epochs} epoch{'s' if epochs != 1 else ''}")
            if info.get("hardware"):
                parts.append(str(info["hardware"]))
            st.caption(" · ".join(str(p) for p in parts))
    for entry in broken:
        st.error(f"Cannot read {entry.path.name}: {entry.error}", icon=":material/broken_image:")


# ---------------------------------------------------------------- train form


def train_form() -> None:
    """The "Train a model" form: bounded inputs; Start launches a background run."""
    no_model = not st.session_state.get(state.MODEL_PATH)
    with st.expander("Train a model", expanded=no_model, icon=":material/model_training:"):
        with st.form("train_form", border=False):
            dataset = st.selectbox(
                "Dataset", list(DATASETS), format_func=lambda d: DATASETS[d].title, key="train_dataset"
            )
            preset = st.selectbox(
                "Model", list(PRESET_LABELS), format_func=PRESET_LABELS.get, key="train_preset",
                help="The tiny model has the same structure with narrower layers: it trains in minutes on a CPU.",
            )  # fmt: skip
            c1, c2 = st.columns(2)
            epochs = c1.number_input("Epochs", *runs.EPOCHS, value=3, step=1, key="train_epochs")
            batch = c2.number_input("Batch size", *runs.BATCH_SIZE, value=128, step=16, key="train_batch")
            lr = c1.number_input(
                "Learning rate", min_value=1e-6, max_value=1.0, value=1e-3, step=1e-4, format="%.4f", key="train_lr"
            )
            iterations = c2.number_input(
                "Routing iterations", *runs.ROUTING_ITERATIONS, value=3, step=1, key="train_iterations"
            )
            train_size = c1.number_input(
                "Training examples", *runs.TRAIN_SIZE, value=60000, step=1000, key="train_size",
                help="Train on a random subset for a quick run (60,000 = the whole training set).",
            )  # fmt: skip
            test_size = c2.number_input(
                "Test examples", *runs.TEST_SIZE, value=10000, step=1000, key="test_size",
                help="Evaluate after each epoch on a random subset (10,000 = the whole test set).",
            )  # fmt: skip
            device = st.selectbox(
                "Device", list(DEVICE_CHOICES), key="train_device", help="auto: a GPU if there is one"
            )
            submitted = st.form_submit_button("Start training", type="primary", icon=":material/play_arrow:")
        # one slot, present on every run, for the start message: the caption below keeps its place, so no stale
        # copy of it lingers while the next run of the app goes on
        notice = st.empty()
        if submitted:
            with notice.container():
                start_training(
                    runs.TrainRequest(
                        dataset=dataset,
                        epochs=int(epochs),
                        batch_size=int(batch),
                        lr=float(lr),
                        routing_iterations=int(iterations),
                        device=device,
                        train_size=int(train_size),
                        test_size=int(test_size),
                        preset=preset,
                    )
                )
        st.caption(f"Runs are saved in `{state.runs_root()}/<time>-<dataset>/`. One run at a time on this machine.")


def start_training(request: runs.TrainRequest) -> None:
    try:
        run = runs.start_run(request, state.runs_root())
    except (ValueError, runs.RunError) as error:
        st.error(str(error), icon=":material/block:")
        return
    st.session_state[state.WATCHED_RUN] = run.name
    st.session_state[state.FINISHED_RUN] = None
    st.success(f"Started {run.name} (pid {run.pid}).", icon=":material/rocket_launch:")


# ---------------------------------------------------------------- live progress

APP_RERUN = "progress_app_rerun"  # a run just ended and its end is shown: rerun the app to list its model


def progress_panel() -> None:
    """Live progress of the running run, refreshed by a fragment (every second while one runs or just ended)."""
    active = runs.active_run(state.runs_root())
    busy = active or st.session_state.get(state.WATCHED_RUN) or st.session_state.get(APP_RERUN)
    st.fragment(run_every=1.0 if busy else 5.0)(_progress_body)()


def _cancel() -> None:
    run = runs.cancel_run(state.runs_root())
    st.session_state["cancel_message"] = (
        f"Stopping {run.name}: it finishes its batch and saves a resumable state." if run else "No run to stop."
    )


def _progress_body() -> None:
    """The progress, or how the last run ended.

    When the run ends, this fragment first replaces its progress with the end in a run of its own (a
    finished fragment run clears its old elements at once); only its next tick reruns the whole app
    so that the picker lists the new model. Rerunning the app straight away would leave the old
    progress, loss and Cancel button on screen, stale, until the page's script had finished too.
    """
    if st.session_state.pop(APP_RERUN, False):
        st.rerun(scope="app")
    root = state.runs_root()
    active = runs.active_run(root)
    watched = st.session_state.get(state.WATCHED_RUN)
    if active is None:
        if watched:
            # the run just ended: show it now, refresh the whole page (and the picker) on the next tick
            st.session_state[state.WATCHED_RUN] = None
            st.session_state[state.FINISHED_RUN] = watched
            state.checkpoint_entries.clear()
            st.session_state[APP_RERUN] = True
        _finished_panel()
        return
    if watched != active.name:
        st.session_state[state.WATCHED_RUN] = active.name
        if not watched:
            st.rerun()  # faster refresh from now on
    st.subheader("Training", anchor=False)
    run = runs.read_run(active.run_dir, root) if active.pid else None
    progress = run.progress if run else {}
    epochs, epoch = int(progress.get("epochs") or 0), int(progress.get("epoch") or 0)
    batches, batch = int(progress.get("batches") or 0), int(progress.get("batch") or 0)
    st.markdown(f"**{active.name}**" + ("" if active.from_dashboard else " (started from the command line)"))
    if not progress:
        st.caption("Starting: loading the data...")
        st.progress(0.0)
    else:
        done = ((epoch - 1) * batches + batch) / max(epochs * batches, 1)
        st.progress(min(max(done, 0.0), 1.0), text=f"Epoch {epoch}/{epochs} · batch {batch}/{batches}")
        c1, c2 = st.columns(2)
        loss, acc = progress.get("loss"), progress.get("accuracy")
        c1.metric("Loss", f"{loss:.4f}" if isinstance(loss, (int, float)) else "—")
        c2.metric("Accuracy", f"{100 * acc:.1f}%" if isinstance(acc, (int, float)) else "—")
        speed = progress.get("images_per_s")
        st.caption(
            f"ETA {texts.format_duration(progress.get('eta_s'))}"
            + (f" · {speed:.0f} images/s" if isinstance(speed, (int, float)) else "")
            + (f" · best test accuracy so far {100 * run.best_accuracy:.2f}%" if run and run.best_accuracy else "")
        )
    if active.from_dashboard:
        st.button(
            "Cancel",
            key="cancel_run",
            icon=":material/stop:",
            on_click=_cancel,
            help="Stops after the current batch; the run can be resumed.",
        )
    message = st.session_state.pop("cancel_message", None)
    if message:
        st.info(message)


def _finished_panel() -> None:
    name = st.session_state.get(state.FINISHED_RUN)
    if not name:
        return
    run_dir = state.runs_root() / name
    if not run_dir.is_dir():
        return
    run = runs.read_run(run_dir, state.runs_root())
    if run.status == "finished":
        acc = f" Test accuracy {100 * run.best_accuracy:.2f}%." if run.best_accuracy is not None else ""
        st.success(f"{name} finished.{acc} Its model is in the picker above.", icon=":material/check_circle:")
    elif run.status == "stopped":
        st.info(f"{name} was stopped after {run.epochs_done} epoch(s); resume it on the Training runs page.")
    elif run.status == "failed":
        st.error(f"{name} failed: {run.reason}. The end of its log:", icon=":material/error:")
        st.code(runs.log_tail(run.path, 15) or "(empty log)", language=None)
    if st.button("Dismiss", key="dismiss_finished"):
        st.session_state[state.FINISHED_RUN] = None
        st.rerun()
