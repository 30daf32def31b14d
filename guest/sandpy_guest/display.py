"""Rich outputs: what `display(obj)`, `plt.show()`, the figures left open and the final
value look like to a person, as MIME bundles made the way IPython makes them.

One implementation for both tiers: the runner calls `new_run` before the code,
`add_result` with the final value, and `take` for the outcome. Every bundle is bounded
here by the run's budget (a count and bytes together, from the host); the host checks
the same bounds again before it holds anything.

Figures: the native tier sets `MPLBACKEND` to this module (`module://sandpy_guest.display`),
a non-interactive Agg backend whose `show()` records every open figure and closes it;
`collect_figures` does the same for the figures still open when the code ends. Nothing
here imports matplotlib: a run that never imports it pays nothing.
"""

import base64
import io
import json
import sys
from typing import Any

from wit_world.imports.types import RichOutput, RichOutputKind, RichOutputLimits

# What `MPLBACKEND` names to make this module matplotlib's backend.
BACKEND = "module://sandpy_guest.display"

# The `_repr_*_` methods IPython's display formatter calls, in its order.
_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
)
_BINARY = frozenset(("image/png", "image/jpeg"))
_MARKER = "\n[... truncated by sandpy: the run's rich-output budget is spent]"

_outputs: list[RichOutput] = []
_dropped = 0
_count = 0
_bytes_left = 0


def new_run(limits: RichOutputLimits) -> None:
    """Forget the previous run's outputs (a session's cell starts empty) and set the
    budget; point matplotlib at this backend if a package imported it already."""
    global _outputs, _dropped, _count, _bytes_left
    _outputs = []
    _dropped = 0
    _count = limits.count
    _bytes_left = limits.bytes
    _use_backend()


def take() -> tuple[list[RichOutput], int]:
    """The run's outputs, in order, and how many were dropped; forgets them."""
    global _outputs, _dropped
    outputs, dropped = _outputs, _dropped
    _outputs, _dropped = [], 0
    return outputs, dropped


def display(*objs: Any, **_ignored: Any) -> None:
    """Show each object as a rich output (IPython's `display`): its `text/plain` repr and
    whatever its `_repr_html_`, `_repr_png_`, ... methods give."""
    for obj in objs:
        _add(RichOutputKind.DISPLAY_DATA, obj)


def add_result(value: Any) -> None:
    """The final expression's value, when it is not `None`."""
    _add(RichOutputKind.EXECUTE_RESULT, value)


def _add(kind: RichOutputKind, obj: Any) -> None:
    global _dropped
    if len(_outputs) >= _count or _bytes_left <= 0:
        _dropped += 1
        return
    data, omitted = _bundle(obj)
    _outputs.append(RichOutput(kind=kind, data=data, omitted=omitted))


def _bundle(obj: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """`text/plain` (cut to the budget left), then every other format that fits whole."""
    global _bytes_left
    found: list[tuple[str, str]] = []
    omitted: list[tuple[str, str]] = []
    figure = _png_of_figure(obj)
    if figure is not None:
        found.append(("image/png", figure))
    else:
        for mime, data in _formats(obj, omitted):
            found.append((mime, data))
    try:
        plain = repr(obj)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not end the run
        plain = f"<{type(obj).__name__} object (repr failed: {type(exc).__name__})>"
    encoded = plain.encode("utf-8", "surrogatepass")
    if len(encoded) > _bytes_left:
        marker = _MARKER if _bytes_left >= len(_MARKER) else ""
        plain = encoded[: _bytes_left - len(marker)].decode("utf-8", "ignore") + marker
        encoded = plain.encode("utf-8", "surrogatepass")
    _bytes_left -= len(encoded)
    data = [("text/plain", plain)]
    for mime, value in found:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > _bytes_left:
            omitted.append((mime, f"{size} bytes, over the {max(_bytes_left, 0)} bytes left of the run's budget"))
            continue
        _bytes_left -= size
        data.append((mime, value))
    return data, omitted


def _formats(obj: Any, omitted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The object's formats as text: `_repr_mimebundle_` first, then each `_repr_*_`."""
    found: dict[str, Any] = {}
    method = _method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            bundle = method(include=None, exclude=None)
            if isinstance(bundle, tuple):
                bundle = bundle[0]
            if isinstance(bundle, dict):
                found.update((k, v) for k, v in bundle.items() if isinstance(k, str) and k != "text/plain")
        except Exception as exc:  # noqa: BLE001 - IPython skips a failing formatter too
            omitted.append(("*", f"_repr_mimebundle_ raised {type(exc).__name__}"))
    for mime, name in _METHODS:
        if mime in found:
            continue
        method = _method(obj, name)
        if method is None:
            continue
        try:
            value = method()
        except Exception as exc:  # noqa: BLE001
            omitted.append((mime, f"{name} raised {type(exc).__name__}"))
            continue
        if isinstance(value, tuple):  # (data, metadata)
            value = value[0]
        if value is not None:
            found[mime] = value
    texts = []
    for mime, value in found.items():
        text = _as_text(mime, value)
        if text is None:
            omitted.append((mime, f"not text ({type(value).__name__})"))
        else:
            texts.append((mime, text))
    return texts


def _method(obj: Any, name: str) -> Any:
    """A bound `_repr_*_` method of the object (not of its class: a class has them
    unbound), as IPython looks them up."""
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a hostile __getattr__
        return None
    return method if callable(method) else None


def _as_text(mime: str, value: Any) -> str | None:
    if mime in _BINARY:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(value).decode("ascii")
        return value if isinstance(value, str) else None
    if mime == "application/json" or mime.endswith("+json"):
        try:
            return value if isinstance(value, str) else json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


# Figures. Only touched when matplotlib is imported already.


def _png_of_figure(obj: Any) -> str | None:
    """A matplotlib figure's PNG, base64, as the inline backend draws it."""
    figure_module = _module("matplotlib.figure")
    if figure_module is None or not isinstance(obj, figure_module.Figure):
        return None
    buffer = io.BytesIO()
    obj.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# matplotlib's modules once seen: the runner restores `sys.modules` to its start after an
# error (for the report), and a session's later cells still draw with the same pyplot.
_matplotlib: dict[str, Any] = {}


def _module(name: str) -> Any:
    module = sys.modules.get(name)
    if module is not None:
        _matplotlib[name] = module
        return module
    return _matplotlib.get(name)


def collect_figures() -> None:
    """Each figure still open becomes a display output, in order, and is closed."""
    helpers = _module("matplotlib._pylab_helpers")
    if helpers is None:
        return
    pyplot = _module("matplotlib.pyplot")
    for manager in helpers.Gcf.get_all_fig_managers():
        figure = manager.canvas.figure
        try:
            _add(RichOutputKind.DISPLAY_DATA, figure)
        except Exception as exc:  # noqa: BLE001 - a figure that cannot be drawn
            sys.stderr.write(f"sandpy: a figure could not be drawn ({type(exc).__name__}: {exc})\n")
        finally:
            if pyplot is not None:
                pyplot.close(figure)
            else:
                helpers.Gcf.destroy(manager)


def show(*_args: Any, **_kwargs: Any) -> None:
    """`plt.show()`: record every open figure and close it."""
    collect_figures()


def _use_backend() -> None:
    """A package the zygote imported read `MPLBACKEND` before the run set it."""
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return
    current = getattr(matplotlib.rcParams, "_get", lambda key: None)("backend")
    if current == BACKEND:
        return
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.switch_backend(BACKEND)
    else:
        matplotlib.rcParams["backend"] = BACKEND


def __getattr__(name: str) -> Any:
    """The backend's canvas and manager, imported when matplotlib loads this backend."""
    if name in ("FigureCanvas", "FigureManager"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.backend_bases import FigureManagerBase

        globals()["FigureCanvas"] = FigureCanvasAgg
        globals()["FigureManager"] = FigureManagerBase
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

