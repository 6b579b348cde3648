"""The sidebar on every page: model picker, "Train a model" form and live training progress."""

from __future__ import annotations

import dataclasses

import streamlit as st
from streamlit.delta_generator_singletons import context_dg_stack, get_default_dg_stack_value

from capsnet.data.datasets import DATASETS
from capsnet.device import available_devices
from capsnet.errors import CapsNetError
from capsnet.runs import estimate, processes
from capsnet.runs.estimate import Speed
from capsnet.training.options import TrainOptions
from capsnet.training.recipes import FOLDER_RECIPE, RECIPES
from dashboard import guards, models, state, texts, training_texts
from dashboard import train_form as form


def write_to_main() -> None:
    """Send what the script writes from here on to the main area, whatever a fragment run left behind.

    The progress panel is a fragment declared inside `with st.sidebar` (Streamlit's way to put one there). A
    fragment's own run sets the script thread's container stack to the one it was declared in, the sidebar's, and
    leaves it set; Streamlit 1.67 resets that stack only after a rerun is requested (streamlit/streamlit#8798). So
    when a whole-app run follows one of the panel's ticks in the same script thread (a click that arrives while
    the tick runs), the whole page is drawn in the sidebar, under the panel, and stays there until the next run:
    seen on 2 first visits out of 12 in Chromium here. A page's own fragments (the routing stepper, the playground's
    charts) leave their containers' stacks the same way. The entry point calls this first, on every whole-app run.
    """
    context_dg_stack.set(get_default_dg_stack_value())


def render() -> None:
    """Draw the whole sidebar."""
    with st.sidebar:
        model_picker()
        train_form()
        progress_panel()


# ---------------------------------------------------------------- model picker


PICKER = "checkpoint_picker"


def _pick() -> None:
    state.choose_checkpoint(st.session_state[PICKER])


def model_picker() -> None:
    """Shipped checkpoints and finished runs; broken files are named, the others stay usable."""
    entries = models.checkpoint_entries(str(state.checkpoints_dir()), str(state.runs_root()))
    usable = [e for e in entries if not e.error]
    broken = [e for e in entries if e.error]
    st.subheader("Model", anchor=False)
    chosen = state.chosen_checkpoint(entries)
    if chosen is None:
        st.warning("No trained model yet. Train one below, or add `checkpoints/mnist.safetensors`.")
    else:
        labels = {str(e.path): e.label for e in usable}
        st.session_state[PICKER] = str(chosen.path)  # the box shows the one choice, whoever made it (a link too)
        st.selectbox(
            "Checkpoint",
            list(labels),
            format_func=lambda p: labels.get(p, p),
            key=PICKER,
            on_change=_pick,
            help="Shipped models from checkpoints/ and the best model of each of your training runs.",
        )
        model = guards.current_model(show_errors=True)
        if model is not None:
            info = model.info
            parts = [info.title or model.dataset]
            if info.test_accuracy is not None:
                parts.append(f"test accuracy {100 * info.test_accuracy:.2f}%")
            epochs = info.epochs_said({name: d.title for name, d in DATASETS.items()})
            if epochs:
                parts.append(epochs)
            if info.hardware:
                parts.append(info.hardware)
            parts.append(f"`{models.display_path(model.checkpoint.path)}`")  # the whole name the box may cut
            st.caption(" · ".join(parts))
    for entry in broken:
        st.error(f"Cannot read {entry.name}: {entry.error}", icon=":material/broken_image:")


# ---------------------------------------------------------------- train form


ETA_MEASURED = "eta_measured"  # the user asked for a measured time estimate: keep showing it


def _key(name: str, scope: str) -> str:
    """A form widget's key: one per recipe (and for the folder recipe, per folder and network: `form.scope`), so that
    choosing a recipe, a folder or a network shows its defaults."""
    return f"{name}_{scope}" if scope else name


def _beta(scope: str) -> str:
    """The β field's key: one for every recipe but the folder's, whose EM network has its own default (`form.scope`)."""
    return _key("train_beta_lr", scope if scope.startswith(FOLDER_RECIPE) else "")


FOLDER_KEY, RECIPE_KEY = "train_folder", "train_recipe"


def _folder_named() -> None:
    """Naming a folder chooses the recipe made for folders (while the paper's is chosen); clearing it goes back."""
    named = bool(str(st.session_state.get(FOLDER_KEY) or "").strip())
    recipe = st.session_state.get(RECIPE_KEY, "paper")
    if named and recipe == "paper":
        st.session_state[RECIPE_KEY] = FOLDER_RECIPE
    elif not named and recipe == FOLDER_RECIPE:
        st.session_state[RECIPE_KEY] = "paper"


def _data_choice() -> tuple[str, str, int]:
    """The dataset, the folder named (stripped, or "") and its side: outside the form, so that the form below shows
    their defaults and counts as soon as they are chosen."""
    f1, f2 = st.columns([3, 1])
    folder = f1.text_input(
        "Your own pictures", key=FOLDER_KEY, placeholder="a folder on this server", on_change=_folder_named,
        help="A folder of labelled pictures (one sub-folder per class, PNG, JPEG, BMP or WebP, grey or colour): "
        "trained on instead of the dataset below, with the recipe for a folder; see docs/own-images.md.",
    ).strip()  # fmt: skip
    side = f2.number_input(
        "Side", *form.IMAGE_SIZE, value=0, step=4, key="train_image_size",
        help="The pictures are read at this side (0: their median side, 28 to 64).",
    )  # fmt: skip
    dataset = st.selectbox(
        "Dataset", list(DATASETS), index=0, format_func=lambda name: DATASETS[name].title, key="train_dataset",
        disabled=bool(folder), help="The folder named above is trained on instead." if folder else None,
    )  # fmt: skip
    return dataset, folder, int(side)


def _model_choice(recipe: str, dataset: str, folder: str) -> tuple[str, TrainOptions]:
    """The data trained on (the folder, or the named dataset where the folder cannot be read: said here) and the
    model chosen for it, with the recipe's defaults for that model."""
    data = folder or dataset
    try:
        if folder:
            form.check_folder(folder)
        d = form.form_defaults(recipe, data)
    except (ValueError, CapsNetError) as error:  # a folder that cannot be read: said here, the paper's shown
        st.error(str(error), icon=":material/block:")
        data, d = dataset, form.form_defaults("paper", dataset)
    choice = st.selectbox(
        "Model", list(labels := form.model_labels()), index=list(labels).index((d.network, d.preset)),
        format_func=lambda model: labels[model], key=_key("train_preset", form.scope(recipe, data, "")),
        help="The tiny models have the same structure with narrower layers: they train in minutes on a CPU. "
        "The CNN baseline is the paper's comparison: the pages set the shipped one (or, without it, the newest "
        "CNN run) beside the CapsNet.",
    )  # fmt: skip
    if choice != (d.network, d.preset):
        try:
            d = form.form_defaults(recipe, data, *choice)
        except (ValueError, CapsNetError):
            d = dataclasses.replace(d, network=choice[0], preset=choice[1])
    return data, d


def _how_long(recipe: str, sized: TrainOptions) -> None:
    """The recipe in a line and how long the run takes here: recorded, or measured when asked."""
    recorded = _eta_text(sized, measure=False)
    st.caption(f"{RECIPES[recipe].summary} {recorded}")
    if not recorded:
        if st.session_state.get(ETA_MEASURED):
            st.caption(_eta_text(sized))
        else:
            st.button("How long on this machine?", key="eta_measure", icon=":material/timer:",
                      on_click=st.session_state.__setitem__, args=(ETA_MEASURED, True),
                      help="Times a few training steps of the chosen model here (a few seconds).")  # fmt: skip


def train_form() -> None:
    """The "Train a model" form: bounded inputs, defaults from TrainOptions; Start launches a background run."""
    no_model = state.chosen_path() is None
    with st.expander("Train a model", expanded=no_model, icon=":material/model_training:"):
        dataset, folder, side = _data_choice()
        recipe = st.radio(
            "Recipe", list(RECIPES), format_func=lambda name: RECIPES[name].title, key=RECIPE_KEY,
            horizontal=True, help="A recipe sets the epochs, batch size, learning rate and schedule below.",
        )  # fmt: skip
        data, d = _model_choice(recipe, dataset, folder)
        network, preset = d.network, d.preset
        scope = form.scope(recipe, data, network)
        # a folder's own counts (its keys say them: another folder starts from its own); a named dataset's fields keep
        # the form's bounds, whichever dataset is chosen (its whole set at the largest)
        whole_train, whole_test = form.examples(data) if data == folder else (form.TRAIN_SIZE[1], form.TEST_SIZE[1])
        sized = dataclasses.replace(d, image_size=side or None) if data == folder and side else d
        _how_long(recipe, sized)
        # Enter in a field does not start a run (a teacher typing an epoch count started a 60,000-image run): only the
        # button does
        with st.form("train_form", border=False, enter_to_submit=False):
            c1, c2 = st.columns(2)
            epochs = c1.number_input("Epochs", *form.EPOCHS, value=d.epochs, step=1, key=_key("train_epochs", scope))
            batch = c2.number_input(
                "Batch size", *form.BATCH_SIZE, value=d.batch_size, step=16, key=_key("train_batch", scope)
            )
            lr = c1.number_input(
                "Learning rate" if d.schedule == "exponential" else "Peak learning rate", *form.LEARNING_RATE,
                value=d.lr, step=1e-4, format="%.4f", key=_key("train_lr", scope),
            )  # fmt: skip
            iterations = c2.number_input(
                "Routing iterations", *form.ROUTING_ITERATIONS, value=d.routing_iterations, step=1,
                key=_key("train_iterations", scope),
                help="How many times each routing layer routes (dynamic routing or EM); a CNN baseline ignores it.",
            )  # fmt: skip
            train_size = c1.number_input(
                "Training examples", 1, whole_train, value=min(d.train_size or whole_train, whole_train), step=1000,
                key=_key("train_size", scope + str(whole_train) * bool(folder)),
                help=f"Train on a random subset for a quick run ({whole_train:,} = the whole training set).",
            )  # fmt: skip
            test_size = c2.number_input(
                "Test examples", 1, whole_test, value=min(d.test_size or whole_test, whole_test), step=1000,
                key=_key("test_size", scope + str(whole_test) * bool(folder)),
                help=f"Evaluate after each epoch on a random subset ({whole_test:,} = the whole test set).",
            )  # fmt: skip
            c3, c4 = st.columns(2)
            beta_lr = c3.number_input(
                "β learning rate ×", *form.BETA_LR, value=d.beta_lr, step=1.0, format="%g", key=_beta(scope),
                help="EM networks only (the others ignore it): each capsule layer's costs β_u and β_a, one number per "
                "capsule type, learn at this multiple of the learning rate (the shipped EM model's last run: 100).",
            )  # fmt: skip
            choices = list(available_devices())  # only what this machine has: no refusal to read afterwards
            device = c4.selectbox(
                "Device", choices, index=choices.index(d.device) if d.device in choices else 0, key="train_device",
                help="auto: a GPU if there is one (this machine's devices only)",
            )  # fmt: skip
            submitted = st.form_submit_button("Start training", type="primary", icon=":material/play_arrow:")
        # one slot, present on every run, for the start message: the caption below keeps its place, so no stale
        # copy of it lingers while the next run of the app goes on
        notice = st.empty()
        if submitted:
            with notice.container():
                try:
                    options = form.form_options(
                        recipe=recipe, dataset=dataset, network=network, preset=preset, epochs=int(epochs),
                        batch_size=int(batch), lr=float(lr), routing_iterations=int(iterations),
                        beta_lr=float(beta_lr), train_size=int(train_size), test_size=int(test_size), device=device,
                        folder=folder, image_size=side,
                    )  # fmt: skip
                except ValueError as error:
                    st.error(str(error), icon=":material/block:")
                else:
                    start_training(options)
        elif st.session_state.get(REFUSAL):
            # a refusal stays in view across the reruns that follow it (the progress panel reruns the app when it
            # first sees the run that caused it) until that run is over
            if processes.active_run(state.runs_root()) is None:
                st.session_state[REFUSAL] = None
            else:
                notice.error(st.session_state[REFUSAL], icon=":material/block:")
        st.caption(f"Runs are saved in `{state.runs_root()}/<time>-<dataset>/`. One run at a time on this machine.")


@st.cache_data(max_entries=16, show_spinner="Timing a few training steps on this machine...")
def _measured_speed(options: TrainOptions) -> Speed:
    return estimate.measure_speed(options)


def _eta_text(options: TrainOptions, measure: bool = True) -> str:
    """'On this machine: about 27 min for 1 epoch of ... (37 images/s, run ...)', for the images `options` train and
    test on (all of them unless it names a subset), from the speed an earlier run measured here for this network,
    else (`measure`) a few training steps timed now; '' when neither."""
    try:
        train_examples, test_examples = estimate.run_examples(options)  # a folder's own counts
        speed = estimate.recorded_speed(processes.list_runs(state.runs_root()), options)
        if speed is None and measure:
            speed = _measured_speed(options)
    except (ValueError, CapsNetError, RuntimeError) as error:  # no estimate is no reason to refuse a run
        return f"(No time estimate: {error}.)"
    if speed is None:
        return ""
    seconds = estimate.estimate_seconds(options, train_examples, test_examples, speed)
    epochs = f"{options.epochs} epoch{'s' if options.epochs != 1 else ''}"
    return (
        f"On this machine: about {texts.format_duration(seconds)} for {epochs} of the {options.network} "
        f"{options.preset} model on {options.dataset} ({speed.images_per_s:.0f} images/s, {speed.source})."
    )


REFUSAL = "train_refusal"  # why the last Start was refused, kept in view while the run that caused it goes on


def start_training(options: TrainOptions) -> None:
    st.session_state[REFUSAL] = None
    try:
        run = processes.start_run(options, state.runs_root())
    except (ValueError, CapsNetError) as error:
        if isinstance(error, processes.RunInProgressError):
            st.session_state[REFUSAL] = str(error)
        st.error(str(error), icon=":material/block:")
        return
    state.watch_run(run.name)
    state.finish_run(None)
    st.success(f"Started {run.name} (pid {run.pid}). {_eta_text(options)}", icon=":material/rocket_launch:")


# ---------------------------------------------------------------- live progress

APP_RERUN = "progress_app_rerun"  # a run just ended and its end is shown: rerun the app to list its model


def progress_panel() -> None:
    """Live progress of the running run, refreshed by a fragment (every second while one runs or just ended)."""
    active = processes.active_run(state.runs_root())
    busy = active or state.watched_run() or st.session_state.get(APP_RERUN)
    st.fragment(run_every=1.0 if busy else 5.0)(_progress_body)()


def _cancel() -> None:
    run = processes.cancel_run(state.runs_root())
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
    active = processes.active_run(root)
    watched = state.watched_run()
    if active is None:
        if watched:
            # the run just ended: show it now, refresh the whole page (and the picker) on the next tick
            state.watch_run(None)
            state.finish_run(watched)
            models.checkpoint_entries.clear()
            st.session_state[APP_RERUN] = True
        _finished_panel()
        return
    if watched != active.name:
        state.watch_run(active.name)
        if not watched:
            st.rerun()  # faster refresh from now on
    st.subheader("Training", anchor=False)
    run = processes.read_run(active.run_dir, root, active) if active.pid else None
    progress = run.progress if run else None
    st.markdown(f"**{active.name}**" + ("" if active.from_dashboard else " (started from the command line)"))
    if progress is None:
        st.caption("Starting: loading the data...")
        st.progress(0.0)
    else:
        p = progress
        st.progress(p.fraction_done, text=f"Epoch {p.epoch}/{p.epochs} · batch {p.batch}/{p.batches}")
        c1, c2 = st.columns(2)
        c1.metric(
            "Loss", f"{p.loss:.4f}" if p.loss is not None else "—",
            help=training_texts.running_loss_help(run.args) if run else None,
        )  # fmt: skip
        c2.metric("Accuracy", f"{100 * p.accuracy:.1f}%" if p.accuracy is not None else "—")
        st.caption(
            f"ETA {texts.format_duration(p.eta_s)}"
            + (f" · {p.images_per_s:.0f} images/s" if p.images_per_s is not None else "")
            + (f" · best test accuracy so far {100 * run.best_accuracy:.2f}%" if run and run.best_accuracy else "")
        )
        if p.warning:  # the trainer's sign that the run is not learning, with what to try
            st.warning(p.warning.capitalize(), icon=":material/trending_flat:")
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
    name = state.finished_run()
    if not name:
        return
    run_dir = state.runs_root() / name
    if not run_dir.is_dir():
        return
    run = processes.read_run(run_dir, state.runs_root())
    if run.status == "finished":
        acc = f" Test accuracy {100 * run.best_accuracy:.2f}%." if run.best_accuracy is not None else ""
        where = (
            f"It is {run.network.described}: evaluate it with `python -m capsnet evaluate`."
            if run.network is not None and run.network.routing is None  # the picker lists the networks that route
            else "Its model is in the picker above."
        )
        st.success(f"{name} finished.{acc} {where}", icon=":material/check_circle:")
    elif run.status == "stopped":
        st.info(f"{name} was stopped after {run.epochs_done} epoch(s); resume it on the Training runs page.")
    elif run.status == "failed":
        st.error(f"{name} failed: {run.reason}. The end of its log:", icon=":material/error:")
        st.code(run.folder.log_tail(15) or "(empty log)", language=None)
    if st.button("Dismiss", key="dismiss_finished"):
        state.finish_run(None)
        st.rerun()
